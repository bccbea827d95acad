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
    "rebind_batch",
    "export_factory_at_batch",
    "per_sample_inputs",
    "max_abs_error",
    "batch_size",
]

PORTABLE_PLATFORMS = ("cpu", "tpu")
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
    import jax

    settings = {
        "jax_hlo_source_file_canonicalization_regex": _STRIP_DIRECTORIES,
        # only the innermost user frame (the lowering's line), not the caller's whole stack
        "jax_include_full_tracebacks_in_locations": False,
    }
    previous = {key: getattr(jax.config, key) for key in settings}
    for key, value in settings.items():
        jax.config.update(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            jax.config.update(key, value)


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


# ---- batch rebinding ---------------------------------------------------------------------


def batch_size(program) -> int | str | None:
    """The shared leading dim of every input (int, symbolic name), or None if they disagree."""
    leading = {spec.shape[0] if spec.shape else None for spec in program.inputs}
    return leading.pop() if len(leading) == 1 else None


def export_factory_at_batch(spec: str, batch: int):
    """MODEL factory spec -> Program captured from the module with example inputs of batch `batch`
    (dim 0 resized by repeating samples): the model's own code re-traced at that batch."""
    import torch

    from tpuedge.model_spec import load_module_and_inputs, spec_name
    from tpuedge.shared_ir.capture import export

    module, inputs = load_module_and_inputs(spec)
    if not inputs or any(t.dim() == 0 for t in inputs) or len({t.shape[0] for t in inputs}) != 1:
        shapes = ", ".join(str(list(t.shape)) for t in inputs) or "no inputs"
        raise UserError(
            f"--batch {batch}: the example inputs of {spec} ({shapes}) share no leading batch dimension; "
            "--batch sets dim 0 of every input. Make the factory return inputs at the batch you want."
        )
    resized = tuple(t[torch.arange(batch) % t.shape[0]] for t in inputs)
    return export(module, resized, name=spec_name(spec))


def rebind_batch(program, batch: int | None):
    """`program` with its batch dimension (dim 0 of every input) set to `batch`.

    A Program holds a captured graph, not the model's Python code, so the batch can change only
    when the graph does not bake the captured size in (a `view(1, 16, 4, 16)` does). We
    re-capture the graph itself at the new batch with torch.export, then check with the cloud
    interpreter that every sample of the new batch gives what the original program gives for it
    (ops that mix samples, or a state tensor baked at the old batch, would not).
    `tpuedge build FACTORY --batch N` re-captures the model's code instead (see
    `export_factory_at_batch`), which always works.
    """
    if batch is None:
        return program
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise UserError(f"--batch must be a positive integer, got {batch!r}.")
    current = batch_size(program)
    if current is None or not program.inputs:
        shapes = ", ".join(s.describe() for s in program.inputs) or "no inputs"
        raise UserError(
            f"--batch {batch}: {program.name!r} has no common batch dimension (inputs: {shapes}); "
            "--batch sets dim 0 of every input. Export the model at the batch you want instead."
        )
    if current == batch:
        return program
    rebound = _recapture(program, batch, current)
    source_inputs, rebound_inputs, shared = per_sample_inputs(program, rebound, seed=1)
    expected = program.run(*source_inputs)
    got = _run_in_jax(program, rebound, rebound_inputs, batch, current)
    for name, e, g in zip(program.output_names, expected, got):
        if e.ndim == 0 or g.ndim == 0 or g.shape[0] != batch:
            raise UserError(
                f"--batch {batch}: output {name!r} of {program.name!r} has no batch dimension to rebind "
                f"(shape {list(e.shape)}); export the model at the batch you want instead."
            )
        err = max_abs_error(e[:shared], g[:shared])
        if not err <= 1e-4 * max(1.0, float(np.max(np.abs(e[:shared]), initial=0.0))):
            raise UserError(
                f"--batch {batch}: after re-capturing {program.name!r} at batch {batch}, output {name!r} no "
                f"longer matches per sample (max error {err:.3g}): the graph mixes samples or bakes the "
                f"captured batch of {current} into a tensor. Export the model at the batch you want instead."
            )
    return rebound


def per_sample_inputs(source, rebound, seed: int) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Inputs for comparing a rebound program with its source sample by sample:
    (inputs for source, inputs for rebound, number of leading samples they share)."""
    source_batch = batch_size(source)
    source_inputs = source.example_inputs(seed=seed)[0]
    if not isinstance(source_batch, int):  # symbolic: example_inputs gave 1 for the dim
        source_batch = 2
        source_inputs = [np.resize(a, (2, *a.shape[1:])) for a in source_inputs]
    if rebound is source:
        return source_inputs, source_inputs, source_batch
    new_batch = batch_size(rebound)
    shared = min(source_batch, new_batch)
    filler = rebound.example_inputs(seed=seed + 1000)[0]
    rebound_inputs = [np.concatenate([a[:shared], f[shared:]]) for a, f in zip(source_inputs, filler)]
    return source_inputs, rebound_inputs, shared


def max_abs_error(expected: np.ndarray, got: np.ndarray) -> float:
    if expected.size == 0:
        return 0.0
    return float(np.max(np.abs(expected.astype(np.float64) - np.asarray(got).astype(np.float64))))


def _recapture(program, batch: int, current):
    import torch
    import torch.fx

    from tpuedge.shared_ir.program import Program

    examples = [
        torch.from_numpy(np.ascontiguousarray(np.resize(a, (batch, *a.shape[1:]))))
        for a in program.example_inputs(seed=0)[0]
    ]
    unlifted = program.exported_program.module(check_guards=False)
    # a fresh GraphModule over the same graph and weights, without the input-shape pre-hook
    module = torch.fx.GraphModule(unlifted, unlifted.graph)
    try:
        ep = torch.export.export(module, tuple(examples), strict=False)
    except Exception as exc:  # torch raises many types; all mean "the graph fixes the batch"
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"--batch {batch} can't be applied to {program.name!r}: it was captured at batch {current} and its "
            f"graph bakes that size in ({first}). A saved program holds the captured graph, not the model "
            "code, so it can't be re-traced at a new batch. Build from the model factory instead "
            f"(`tpuedge build path/model.py:factory --batch {batch}` re-captures the model at that batch), "
            "or export with a dynamic batch: "
            "tpuedge.export(model, (x,), dynamic_shapes=({0: torch.export.Dim('batch')},))."
        ) from exc
    return Program(ep, name=program.name)


def _run_in_jax(original, rebound, inputs, batch: int, current) -> list[np.ndarray]:
    """Run the re-captured graph with the cloud interpreter, not torch: torch's native kernels
    don't all check shapes (aten.lstm given a state baked at [1, 1, H] and a batch of 8
    corrupts the heap and kills the process), while the JAX lowerings check them."""
    from tpuedge.cloud.interpreter import to_jax
    from tpuedge.shared_ir.errors import InternalError

    try:
        return [np.asarray(o) for o in to_jax(rebound).forward(*inputs)]
    except InternalError as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise UserError(
            f"--batch {batch} can't be applied to {original.name!r}: re-captured at batch {batch}, its graph "
            f"no longer runs ({first}); it bakes the captured batch of {current} into a tensor. Build from "
            f"the model factory instead (`tpuedge build path/model.py:factory --batch {batch}`)."
        ) from exc
