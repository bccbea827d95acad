"""The forward's intermediate values as a second exported function: what per-layer verify reads.

`model.layers.jaxexport` holds `layers(params, buffers, *inputs) -> {node name: value}` over
the same weights and calling convention as `model.jaxexport`; the names are the captured
Program's node names (the IR layers `tpuedge verify --per-layer` compares). Running it with
the folder's `model.safetensors` gives the values of what ships, so a weights file changed
after the build shows up layer by layer, where re-lowering the Program would not see it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LAYERS_FILE", "layers_function", "serialize_layers", "layers_blob"]

LAYERS_FILE = "model.layers.jaxexport"


def layers_function(export) -> Any:
    """(params, buffers, *inputs) -> {captured node name: value} for every tensor-valued node.

    Values of the helper nodes a decomposition adds ("sdpa/bmm") and tuple-valued nodes are
    left out: only what an IR layer holds is exported."""
    import jax

    jax_program = export.jax_program

    def layers(params, buffers, *inputs):
        record = jax_program.intermediates(params, buffers, *inputs)
        return {name: value for name, value in record.items() if "/" not in name and isinstance(value, jax.Array)}

    layers.__name__ = export.function.__name__.replace("_forward", "_layers")
    return layers


def serialize_layers(export, platforms: tuple[str, ...]) -> tuple[bytes, Any, list[str]]:
    """(serialized blob, the Exported object, the node names it returns in the order of its results)."""
    import jax

    from tpuedge.cloud.stablehlo_export import relocatable_locations

    with relocatable_locations():
        exported = jax.export.export(jax.jit(layers_function(export)), platforms=list(platforms))(
            *export.abstract_arguments()
        )
    return bytes(exported.serialize()), exported, result_names(exported)


def result_names(exported) -> list[str]:
    """The node names of the exported layers function's results, in result order."""
    positions = exported.out_tree.unflatten(list(range(exported.out_tree.num_leaves)))  # {name: result index}
    return sorted(positions, key=positions.__getitem__)


def layers_blob(program, export) -> tuple[bytes, list[str]]:
    """(serialized layers blob, its node names) for `export`, the forward of `program`, through
    the build cache like the forward's blob (same key parts, its own stage)."""
    from tpuedge.cloud.stablehlo_export import PORTABLE_PLATFORMS
    from tpuedge.shared_ir.cache_keys import cached_stage

    made: dict[str, Any] = {}

    def build() -> bytes:
        blob, exported, made["names"] = serialize_layers(export, PORTABLE_PLATFORMS)
        return blob

    blob = cached_stage("jax_layers_export", {"ir": program.fingerprint, "platforms": list(PORTABLE_PLATFORMS)}, build)
    if "names" in made:
        return blob, made["names"]
    import jax

    return blob, result_names(jax.export.deserialize(bytearray(blob)))
