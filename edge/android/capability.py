"""android capability, read from litert-torch's own tables (never hand-written):

  - its lowering registry (`litert_torch.backend.lowerings`: ATen op -> MLIR lowering),
  - its pre-lower decomposition table (ops it rewrites into lowerable ops first),
  - its composite builders (ops kept whole, e.g. GELU, avg_pool2d, as StableHLO composites).

`decompose` is litert-torch's pre-convert decomposition table, the same one the android build
applies, so `tpuedge check --target android` sees the graph the converter will see.
"""

from __future__ import annotations

from functools import lru_cache

from tpuedge.shared_ir.op_registry import OpRegistry, op_key
from tpuedge.shared_ir.targets import Capability

__all__ = ["android_capability", "litert_op_registry"]

LOWERED = "litert-torch lowering"
DECOMPOSED = "decomposed by litert-torch before lowering"
COMPOSITE = "kept whole as a StableHLO composite (fused on device)"


@lru_cache(maxsize=1)
def litert_op_registry() -> OpRegistry:
    """Every op litert-torch 0.10 can take after its pre-convert decompositions."""
    from tpuedge.edge.litert.litert_session import litert_session

    with litert_session():
        from litert_torch import fx_infra
        from litert_torch.backend import lowerings

        from tpuedge.edge.generative.cache_write_lowering import register_cache_write_lowering
        from tpuedge.edge.litert.litert_torch_compat import composite_ops
        from tpuedge.shared_ir.torch_compat import is_op_overload, is_op_packet

        register_cache_write_lowering()

    registry = OpRegistry("android")
    notes: dict[str, str] = {}
    for op in lowerings.registry.global_registry.registered_ops:
        notes.setdefault(op_key(op), LOWERED)
    for op in fx_infra.decomp.pre_lower_decomp():
        notes.setdefault(op_key(op), DECOMPOSED)
    for op in composite_ops():
        if is_op_overload(op) or is_op_packet(op):
            notes[op_key(op)] = COMPOSITE
    for key, note in sorted(notes.items()):
        registry.add(key, note)
    return registry


def _decompose(exported_program):
    from tpuedge.edge.litert.litert_lowering import decompose_for_litert

    return decompose_for_litert(exported_program)


@lru_cache(maxsize=1)
def android_capability() -> Capability:
    registry = litert_op_registry()
    return Capability(
        target="android",
        ops=registry,
        decompose=_decompose,
        dynamic_shapes=False,
        notes={key: entry for key, entry in registry.items()},
        # ops litert-torch lowers none of that the LiteRT IR passes (litert_lowering.py) rewrite
        rewritten={
            key: f"with even windows: rewritten on the IR as a max pool{suffix}, exact"
            for key, suffix in (
                ("aten.adaptive_max_pool2d", " (MAX_POOL_2D)"),
                ("aten.adaptive_max_pool1d", ": a max over each window"),
            )
        },
        random_ops=False,
    )
