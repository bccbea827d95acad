"""Run the float IR and an artifact over the same rows, one runtime call at a time.

Runtimes built for a fixed batch (LiteRT and TFLite-Micro models exported with batch 1) get
the rows in calls of that batch, the last call padded and its extra outputs dropped; a rich
progress bar shows the calls when there are many. An artifact whose interface is the IR's in
channels-last layout (NHWC for an NCHW model) gets its inputs and outputs transposed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.layouts import inverse_permutation, layout_permutation
from tpuedge.shared_ir.tensors import TensorSpec

__all__ = [
    "single_torch_thread",
    "run_rows",
    "call_batch",
    "call_chunks",
    "check_interface",
]

_DYNAMIC_BATCH_CALL = 64  # rows per call when the batch axis is dynamic


@contextlib.contextmanager
def single_torch_thread() -> Iterator[None]:
    """Torch eager on one thread for the duration: on small per-sample calls several threads
    are 5-100x slower (docs/stack-facts.md), and the numbers don't depend on it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def check_interface(program, artifact) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Input and output layout permutations of `artifact` relative to `program` (UserError if they differ)."""
    problems, in_perms, out_perms = [], [], []
    for kind, ir_specs, rt_specs, perms in (
        ("input", program.inputs, artifact.inputs, in_perms),
        ("output", program.outputs, artifact.outputs, out_perms),
    ):
        if len(ir_specs) != len(rt_specs):
            problems.append(f"the model has {len(ir_specs)} {kind}(s), the artifact {len(rt_specs)}")
            continue
        for ir, rt in zip(ir_specs, rt_specs):
            perm = layout_permutation(ir.shape, rt.shape)
            if perm is None:
                problems.append(
                    f"{kind} {ir.name!r} is {list(ir.shape)} in the model but {list(rt.shape)} in the artifact"
                )
            perms.append(perm or ())
    if problems:
        raise UserError(
            f"The artifact in {artifact.directory} does not fit the model: "
            + "; ".join(problems)
            + ". Rebuild the artifact from this model with `tpuedge build`."
        )
    return in_perms, out_perms


def call_batch(specs: Sequence[TensorSpec], count: int, whole_calls: bool) -> int:
    """Rows per runtime call: the exported batch, or a chunk when the batch axis is dynamic."""
    if whole_calls:
        return 1
    first = specs[0].shape[0] if specs and specs[0].shape else None
    return first if isinstance(first, int) else min(count, _DYNAMIC_BATCH_CALL)


def call_chunks(
    rows: Sequence[np.ndarray], batch: int, *, whole_calls: bool = False
) -> Iterator[tuple[list[np.ndarray], int]]:
    """(inputs of one call, how many of its rows are real) — the last call is padded."""
    count = len(rows[0])
    for start in range(0, count, batch):
        real = min(batch, count - start)
        args = []
        for r in rows:
            if whole_calls:
                args.append(r[start])
                continue
            chunk = r[start : start + real]
            if real < batch:  # pad a fixed-batch call with copies of its last row
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - real, axis=0)])
            args.append(chunk)
        yield args, real


def run_rows(
    fn: Callable[..., list[np.ndarray]],
    specs: Sequence[TensorSpec],
    rows: Sequence[np.ndarray],
    *,
    whole_calls: bool = False,
    input_perms: Sequence[tuple[int, ...]] = (),
    output_perms: Sequence[tuple[int, ...]] = (),
    label: str = "running",
    progress: bool = False,
) -> list[np.ndarray]:
    """Feed `rows` (IR layout, first axis = rows) through `fn` in calls of the runtime's batch.

    Returns one array per output, first axis = rows (or calls, for outputs without a batch axis).
    """
    count = len(rows[0])
    batch = call_batch(specs, count, whole_calls)
    calls = -(-count // batch)
    collected: list[list[np.ndarray]] = []

    def one_call(args: list[np.ndarray], real: int) -> None:
        args = [
            np.ascontiguousarray(np.transpose(a, input_perms[i]) if i < len(input_perms) and input_perms[i] else a)
            for i, a in enumerate(args)
        ]
        outs = fn(*args)
        if not collected:
            collected.extend([] for _ in outs)
        for j, out in enumerate(outs):
            out = np.asarray(out)
            perm = output_perms[j] if j < len(output_perms) else ()
            if perm:
                out = np.transpose(out, inverse_permutation(perm))
            if whole_calls or out.ndim == 0 or out.shape[0] != batch:
                collected[j].append(out[None])
            else:
                collected[j].append(out[:real])

    chunks = call_chunks(rows, batch, whole_calls=whole_calls)
    if progress and calls > 1:
        from tpuedge.shared_ir.progress import stage_progress

        with stage_progress(label, total=calls) as step:
            for k, (args, real) in enumerate(chunks):
                step(f"call {k + 1}")
                one_call(args, real)
    else:
        for args, real in chunks:
            one_call(args, real)
    return [np.concatenate(parts, axis=0) for parts in collected]
