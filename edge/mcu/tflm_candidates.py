"""Can TFLite-Micro run a candidate of the int8 search? The mcu build's check of each upgraded
recipe (int16 activations) before the search scores it, and the float-compute rule the build
applies to its final model.

An upgraded candidate can hold an op ai-edge-quantizer left float at 16 bits, an integer ADD
whose rescale aborts the runtime, or a kernel TFLite-Micro refuses with int16 tensors when it
prepares or runs it, or one that aborts the process; `tflm_candidate_problem` says which, running
the candidate once in a child process.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "tflm_candidate_problem",
    "tflm_candidate_outputs",
    "tflm_allocated_bytes",
    "float_compute_ops",
    "kernel_problem",
]


def tflm_candidate_problem(tflite: bytes) -> str | None:
    """Why TFLite-Micro can't run a quantized candidate of the int8 search, or None: an op left in
    float (ai-edge-quantizer has no int16 recipe for it: HARD_SWISH), or a kernel that refuses its
    int16 tensors when the interpreter prepares it (GATHER_ND, FULLY_CONNECTED over two
    activations) or runs it (RESIZE_BILINEAR, which prepares). Run once on zeros, in a child
    process (a kernel may abort instead of refusing), with an arena no plan or kernel can outgrow
    (`_candidate_arena`), so the answer is about kernels, never about the arena. A candidate whose ops, by builtin and tensor dtypes, all
    ran in an earlier candidate is not run again (most of a search's candidates). All of it is
    judged on the candidate in TFLite-Micro's form (edge/mcu/tflm_forms.py), parsed once; its bytes
    are written in that form only when it runs."""
    from tpuedge.edge.litert.litert_runtime import aborting_op

    # judged in the form TFLM gets: the quantizer leaves an embedding lookup in float, and the
    # build stores its table in int8 (edge/mcu/tflm_forms.py); the raw candidate's float lookup
    # refused every int16 candidate of a model with an embedding
    form = _tflm_form(tflite)
    floats = _float_compute_ops(form.parsed)
    if floats:
        return "left in float: " + ", ".join(f"{name} x{count}" for name, count in sorted(floats.items()))
    aborting = aborting_op(tflite)  # TFLite-Micro's ADD and SUB rescale (and abort) as LiteRT's do
    if aborting:
        return aborting
    signatures = _op_signatures(form.parsed)
    if signatures <= _RAN_IN_TFLM:
        return None
    problem = kernel_problem(form.data(), form.arena)
    if problem is None:
        _RAN_IN_TFLM.update(signatures)
    return problem


def tflm_candidate_outputs(tflite: bytes, samples) -> list[list[np.ndarray]]:
    """A candidate of the int8 search run in TFLite-Micro, in its form, on `samples` (float in,
    float out), with an arena no plan can outgrow: what the mcu search scores, not LiteRT's run.
    The two differ where it matters most: LiteRT's int16 RSQRT misses by up to 30% on inputs
    near the bottom of a wide range (silero-vad's spectrum magnitude, 0 to 717), where
    TFLite-Micro's is within 1% (tests/test_mcu_int16.py), so LiteRT scored silero-vad's int16
    candidates below all-int8. Run in the build's TFLite-Micro worker process (edge/mcu/tflm_worker.py:
    a kernel may abort on a candidate the check did not run, all-int8 among them). Raises
    TflmError where TFLite-Micro refuses the model or crashes on it."""
    from tpuedge.edge.mcu.tflm_worker import worker_outputs

    form = _tflm_form(tflite)
    return worker_outputs(form.data(), form.arena, samples)


def tflm_allocated_bytes(tflite: bytes) -> int | None:
    """What TFLite-Micro's allocator takes for a candidate, in its form, allocated in an arena no
    plan can outgrow and not run (in the build's worker process): a lower bound of the arena it
    needs, since the plan is the same in any arena that holds it, and the arena probe's smallest
    size is at or above it (Resemblyzer: 7,934,512 B taken, 8,099,136 B needed; equal on the
    CNNs). None where the interpreter does not say. Raises TflmError where TFLite-Micro refuses
    the model or crashes on it."""
    from tpuedge.edge.mcu.tflm_worker import worker_allocated_bytes

    form = _tflm_form(tflite)
    return worker_allocated_bytes(form.data(), form.arena)


class _TflmForm:
    """A candidate in TFLite-Micro's form (edge/mcu/tflm_forms.py), buffers inline: parsed, its
    kernels' arena bound, and its bytes, written once when first asked for."""

    def __init__(self, tflite: bytes):
        from tpuedge.edge.flatbuffer import tflite_file
        from tpuedge.edge.mcu.tflm_forms import tflm_forms_in_place
        from tpuedge.edge.mcu.tflm_model import inline_buffers

        self._inlined = inline_buffers(tflite)  # the lookup tables' values, which the form rewrites
        self.parsed = tflite_file.read_model(self._inlined)
        self._changed = bool(tflm_forms_in_place(self.parsed))
        self.arena = _candidate_arena(self.parsed, len(tflite))
        self._data: bytes | None = None

    def data(self) -> bytes:
        if self._data is None:
            from tpuedge.edge.flatbuffer import tflite_file

            self._data = tflite_file.write_model(self.parsed) if self._changed else self._inlined
        return self._data


@functools.lru_cache(maxsize=1)
def _tflm_form(tflite: bytes) -> _TflmForm:
    """The search checks a candidate, then scores it: one form for both (the newest only)."""
    return _TflmForm(tflite)


def kernel_problem(model: bytes, arena: int) -> str | None:
    """`model` run once on zeros in the build's TFLite-Micro worker process (edge/mcu/tflm_worker.py):
    some kernels abort the process on an int16 candidate instead of refusing it (timm's PiT-tiny:
    SIGABRT inside invoke, the build gone with exit 134). What TFLite-Micro said, or None."""
    from tpuedge.edge.mcu.tflm_runtime import TflmError
    from tpuedge.edge.mcu.tflm_worker import worker_outputs

    try:
        worker_outputs(model, arena, None)
    except TflmError as exc:
        lines = [line.strip() for line in exc.log.splitlines() if line.strip()]
        # "TFLite-Micro refused it" or "TFLite-Micro crashed running it (exit N)", and its last words
        return (f"{exc.message}: " + "; ".join(lines[-2:])) if lines else exc.message
    return None


# (builtin, input dtypes, output dtypes) of every op some candidate ran in TFLite-Micro, this process
_RAN_IN_TFLM: set[tuple] = set()


def _op_signatures(model) -> set[tuple]:
    from tpuedge.edge.flatbuffer import tflite_file

    graph, names = model.subgraphs[0], tflite_file.operator_names(model)

    def dtypes(indices) -> tuple[str, ...]:
        return tuple(tflite_file.dtype_name(graph.tensors[int(i)].type) if int(i) >= 0 else "-" for i in indices)

    return {(names[op.opcodeIndex], dtypes(op.inputs), dtypes(op.outputs)) for op in graph.operators or []}


def _candidate_arena(parsed, model_bytes: int) -> int:
    """An arena no plan of the candidate can outgrow (an upper bound on the quantized candidate
    holds for its TFLite-Micro form, which only drops tensors): every computed tensor's bytes, as
    if none shared memory; what kernels keep per op, at most twice the model's bytes (a
    per-channel FULLY_CONNECTED or CONV_2D keeps a 4-byte multiplier and shift per output
    channel, each of which has a row of int8 weights); TFLite-Micro's bookkeeping per tensor and
    op; and scratch buffers. A flat 1 MiB beyond the tensors refused Resemblyzer's all-int8
    model, whose ~800 per-channel FULLY_CONNECTEDs of 1,024 outputs keep some 6.5 MB: "FULLY_CONNECTED
    failed to prepare", a verdict about the arena, not the kernel."""
    from tpuedge.edge.flatbuffer import tflite_file

    graph = parsed.subgraphs[0]
    computed = sum(tflite_file.tensor_bytes(t) for t in graph.tensors if not tflite_file.is_constant(parsed, t))
    entries = len(graph.tensors) + len(graph.operators or [])
    return _CANDIDATE_ARENA_SLACK + computed + 2 * model_bytes + _BOOKKEEPING_PER_ENTRY * entries


# scratch buffers and TFLite-Micro's own fixed needs; and its bookkeeping per tensor and op (its
# tensor, node and planner records are tens of bytes each)
_CANDIDATE_ARENA_SLACK = 1 << 20
_BOOKKEEPING_PER_ENTRY = 256


def float_compute_ops(tflite: bytes) -> dict[str, int]:
    """Ops that compute in float (op name -> count): float tensors written other than the model's
    I/O, and not an integer-to-float cast at the int8 graph's edge; a DEQUANTIZE is counted only
    when nothing else is (it feeds a float op, which is reported itself)."""
    from tpuedge.edge.flatbuffer import tflite_file

    return _float_compute_ops(tflite_file.read_model(tflite))


def _float_compute_ops(model) -> dict[str, int]:
    from tpuedge.edge.flatbuffer import tflite_file

    sg = model.subgraphs[0]
    io = {int(i) for i in sg.inputs} | {int(i) for i in sg.outputs}
    names = tflite_file.operator_names(model)
    readers: dict[int, list[str]] = {}
    for op in sg.operators:
        for t in op.inputs:
            readers.setdefault(int(t), []).append(names[op.opcodeIndex])
    float_ops: dict[str, int] = {}
    for op in sg.operators:
        outputs = [int(o) for o in op.outputs]
        if _integer_to_int8_cast(sg, names[op.opcodeIndex], op, readers):
            continue
        if any(o not in io and tflite_file.dtype_name(sg.tensors[o].type) in ("float32", "float16") for o in outputs):
            float_ops[names[op.opcodeIndex]] = float_ops.get(names[op.opcodeIndex], 0) + 1
    if len(float_ops) > 1:
        float_ops.pop("DEQUANTIZE", None)
    return float_ops


def _integer_to_int8_cast(graph, name: str, op, readers: dict[int, list[str]]) -> bool:
    """A CAST of int32 data (an int mask, `mask.to(torch.float32)`; the converter gives 64-bit
    inputs 32 bits) to float whose value only QUANTIZE reads: a conversion at the edge of the
    int8 graph, which TFLite-Micro runs (CAST, then QUANTIZE; tests/test_mcu_text_forms.py), not
    float compute. `check` passes these casts, and the build refused them."""
    from tpuedge.edge.flatbuffer import tflite_file

    if name != "CAST" or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    source, value = int(op.inputs[0]), int(op.outputs[0])
    int32 = tflite_file.dtype_name(graph.tensors[source].type) == "int32"
    return int32 and bool(readers.get(value)) and all(r == "QUANTIZE" for r in readers[value])
