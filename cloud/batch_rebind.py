"""`--batch N` for cloud-tpu: a Program with the batch dimension of every input set to N.

A saved Program is re-captured at the new batch and checked sample by sample with the cloud
interpreter (`rebind_batch`); a model factory is simply traced again at that batch
(`export_factory_at_batch`).
"""

from __future__ import annotations

import numpy as np

from tpuedge.quantize.metrics import max_abs_error
from tpuedge.shared_ir.errors import UserError

__all__ = ["batch_size", "rebind_batch", "export_factory_at_batch", "per_sample_inputs"]


def batch_size(program) -> int | str | None:
    """The shared leading dim of every input (int, symbolic name), or None if they disagree."""
    leading = {spec.shape[0] if spec.shape else None for spec in program.inputs}
    return leading.pop() if len(leading) == 1 else None


def export_factory_at_batch(spec: str, batch: int):
    """MODEL factory spec -> Program captured from the module with example inputs of batch `batch`
    (dim 0 resized by repeating samples): the model's own code re-traced at that batch."""
    import torch

    from tpuedge.shared_ir.model_spec import load_module_and_inputs, spec_name
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
