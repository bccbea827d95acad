"""The forward pass of a Program as a pure JAX function, its StableHLO text and a jax.export blob.

The exported function takes the weights as ARGUMENTS, not embedded constants:
`forward(params, buffers, *inputs) -> tuple(outputs)`, with `params`/`buffers` dicts keyed by
the torch state-dict names. That keeps the StableHLO small and readable, lets a TPU server shard
or swap the weights (e.g. the ones a train step produced) and matches the train step's calling
convention. The weights travel beside it in `model.safetensors`.

Determinism: jax.export writes MLIR source locations into the blob, by default the whole Python
call stack of every traced op (up to 100 frames) with absolute paths. Measured: the same model
gave different bytes when exported from two checkouts, and when `tpuedge.build` was called from
two different lines (the caller's frames, pytest's included, were in the blob). We export with
`jax_include_full_tracebacks_in_locations` off (one frame: the lowering's own line) and
`jax_hlo_source_file_canonicalization_regex` stripping directories, so locations keep
`file.py:line` of tpuedge's lowering and nothing about the machine or the caller.
Setting the batch of a Program before export (`--batch`) is batch_rebind.py's job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = [
    "PORTABLE_PLATFORMS",
    "ForwardExport",
    "forward_export",
    "stablehlo_text",
    "argument_names",
    "serialize_export",
    "relocatable_locations",
]

# cuda too, so tpuedge.load(DIR).run runs on the GPU JAX defaults to (lowering needs no GPU)
PORTABLE_PLATFORMS = ("cpu", "cuda", "tpu")
# Strip everything up to the last "/" of the source paths jax writes into MLIR locations.
_STRIP_DIRECTORIES = r".*/"


@dataclass(frozen=True)
class ForwardExport:
    """A Program's forward as JAX: the function, the weights and abstract arguments to trace it."""

    function: Callable[..., tuple]  # (params, buffers, *inputs) -> tuple of outputs
    jax_program: Any  # the interpreter's JaxProgram: (params, buffers, *inputs, rng_key) -> (buffers, outputs)
    params: dict[str, Any]  # jax arrays, torch state-dict names
    buffers: dict[str, Any]
    input_avals: tuple[Any, ...]  # jax.ShapeDtypeStruct per user input (jax's canonical dtypes)

    def abstract_arguments(self) -> tuple:
        import jax

        def aval(a):
            return jax.ShapeDtypeStruct(a.shape, a.dtype)

        return (jax.tree.map(aval, self.params), jax.tree.map(aval, self.buffers), *self.input_avals)


def forward_export(program) -> ForwardExport:
    """Lower `program` to JAX with the cloud interpreter and wrap its forward pass for export."""
    from tpuedge.cloud.tpu_compile import initialize_jax_quietly

    initialize_jax_quietly()
    import jax

    from tpuedge.cloud.interpreter import to_jax

    input_avals = []
    for spec in program.inputs:
        if any(isinstance(d, str) for d in spec.shape):
            raise UserError(
                f"Input {spec.name!r} of {program.name!r} has symbolic dims {list(spec.shape)}; the cloud-tpu "
                "artifact is compiled for fixed shapes. Pass --batch N to bind the batch dimension."
            )
        dtype = jax.dtypes.canonicalize_dtype(np.dtype(spec.dtype))
        input_avals.append(jax.ShapeDtypeStruct(tuple(spec.shape), dtype))
    jax_program = to_jax(program)

    def forward(params, buffers, *inputs):
        _, outputs = jax_program(params, buffers, *inputs, rng_key=None)
        return tuple(outputs)

    forward.__name__ = f"{_identifier(program.name)}_forward"
    return ForwardExport(forward, jax_program, dict(jax_program.params), dict(jax_program.buffers), tuple(input_avals))


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in name) or "model"
    return cleaned if not cleaned[0].isdigit() else f"m_{cleaned}"


@contextlib.contextmanager
def relocatable_locations() -> Iterator[None]:
    """Within the block, MLIR locations name source files without their directories."""
    from tpuedge.shared_ir.jax_compat import process_config

    settings = {
        "jax_hlo_source_file_canonicalization_regex": _STRIP_DIRECTORIES,
        # only the innermost user frame (the lowering's line), not the caller's whole stack
        "jax_include_full_tracebacks_in_locations": False,
    }
    with process_config(settings):  # no thread-local form: serialized (shared_ir/jax_compat.py)
        yield


def argument_names(export: ForwardExport, input_names: list[str]) -> list[str]:
    """Names of the exported function's flat arguments, in order (jax flattens dicts by sorted key)."""
    return [
        *(f"params[{n!r}]" for n in sorted(export.params)),
        *(f"buffers[{n!r}]" for n in sorted(export.buffers)),
        *input_names,
    ]


def stablehlo_text(export: ForwardExport, program) -> str:
    """StableHLO of the forward (single device, `jax.jit(f).lower(...).as_text()`), under a
    comment header that names each %argN (MLIR allows // comments)."""
    import jax

    with relocatable_locations():
        text = jax.jit(export.function).lower(*export.abstract_arguments()).as_text()
    header = [
        f"// tpuedge cloud-tpu: StableHLO of {program.name!r} (IR {program.fingerprint[:12]}), forward only.",
        "// Signature: forward(params, buffers, *inputs); the weights are arguments (model.safetensors).",
    ]
    header += [f"//   %arg{i} = {name}" for i, name in enumerate(argument_names(export, program.input_names))]
    return "\n".join(header) + "\n" + text


def serialize_export(export: ForwardExport, platforms: tuple[str, ...] = PORTABLE_PLATFORMS) -> tuple[bytes, Any]:
    """(serialized jax.export blob for `platforms`, the Exported object)."""
    import jax

    with relocatable_locations():
        exported = jax.export.export(jax.jit(export.function), platforms=list(platforms))(*export.abstract_arguments())
    return bytes(exported.serialize()), exported
