"""A decoder's decode step as one fully int8 .tflite for TFLite-Micro, KV caches tied.

    samples, cache_ranges = decode_step_samples(bundle.reference(), sequences)
    step = int8_decode_step(decode_program, samples, cache_ranges)   # Int8DecodeStep

The mcu build quantizes the decode entry alone: TFLite-Micro runs subgraph 0 only (a file
with a second signature crashed its loader), so the firmware, like the host, prefills a prompt
through decode one token at a time. The path is edge's one int8 path, without its per-op search
(edge/litert/static_int8.py): `float_tflite` (litert-torch), then ai-edge-quantizer through
`run_quantizer` with the static int8 recipe `quantizer_recipe` writes, integer I/O. The search
is not used because it scores candidates by output cosine on independent samples and may
choose int16 or float islands, while a decode step's error feeds back through its caches (the
build measures token agreement over whole sequences instead), TFLite-Micro takes no float op,
and every candidate would have to keep the caches' ranges tied.

- Calibration: real decode steps of the float IR (teacher-forced text through the bundle's
  reference), each step's inputs one sample: positions 0 to the cache's end, caches as they fill.
- Tied caches: each cache input and the DYNAMIC_UPDATE_SLICE output it becomes get one range
  (everything the cache held over calibration, 0 included: a fresh cache is all zeros), so the
  quantizer gives them one scale and zero point, adds no requantization, and the host (or the
  device) hands the raw int8 output back as the next step's input.
- Then as any mcu model: every buffer inside the flatbuffer (TFLite-Micro reads an external one
  as zeros), the float embedding lookups folded to int8 tables (edge/mcu/tflm_forms.py), the
  biases' unread quantization tables dropped, and no op left that computes in float; and each
  FULLY_CONNECTED written as the 1x1 CONV_2D it is (edge/generative/fc_as_conv.py), so that
  TFLite-Micro and LiteRT compute the step bit for bit alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpuedge.shared_ir.errors import InternalError, Problem, ProblemsError

__all__ = ["Int8DecodeStep", "decode_step_samples", "int8_decode_step", "cache_write_pairs"]


@dataclass(frozen=True)
class Int8DecodeStep:
    tflite: bytes
    float_tflite: bytes
    recipe: dict
    buffers_moved_inline: int


class _Recording:
    """A StepRunner that runs `inner` and keeps each decode step's inputs, and the caches' ranges."""

    def __init__(self, inner):
        self.inner = inner
        self.prefill_lengths = ()  # every token a decode step: each one a calibration sample
        self.cache_length = inner.cache_length
        self.samples: list[list[np.ndarray]] = []
        self.low: list[float] = []
        self.high: list[float] = []

    def initial_cache(self) -> list:
        return self.inner.initial_cache()

    def run(self, entry, tokens, input_pos, cache):
        self.samples.append([np.asarray(tokens, np.int32), np.asarray(input_pos, np.int32), *cache])
        logits, cache = self.inner.run(entry, tokens, input_pos, cache)
        lows, highs = [float(c.min()) for c in cache], [float(c.max()) for c in cache]
        self.low = [min(a, b) for a, b in zip(self.low, lows)] if self.low else lows
        self.high = [max(a, b) for a, b in zip(self.high, highs)] if self.high else highs
        return logits, cache


def decode_step_samples(
    reference, sequences: list[list[int]]
) -> tuple[list[list[np.ndarray]], list[tuple[float, float]]]:
    """(each decode step's inputs as the float IR runs `sequences` teacher-forced, each cache's
    (min, max) over them and their outputs, 0 included)."""
    from tpuedge.shared_ir.generative.generation import teacher_forced_logits

    recording = _Recording(reference)
    for ids in sequences:
        teacher_forced_logits(recording, ids)
    ranges = [(min(lo, 0.0), max(hi, 0.0)) for lo, hi in zip(recording.low, recording.high)]
    return recording.samples, ranges


def cache_write_pairs(float_tflite: bytes, cache_inputs: list[str]) -> list[tuple[str, str]]:
    """(cache input tensor, the DYNAMIC_UPDATE_SLICE output written from it) per cache, by name."""
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    graph = model.subgraphs[0]
    names = tflite_file.operator_names(model)
    writes = {
        int(op.inputs[0]): int(op.outputs[0])
        for op in graph.operators
        if names[op.opcodeIndex] == "DYNAMIC_UPDATE_SLICE"
    }
    pairs = []
    for index, cache in zip((int(i) for i in graph.inputs[2:]), cache_inputs):  # after tokens, input_pos
        name = tflite_file.text(graph.tensors[index].name)
        if not name.endswith(cache) or index not in writes:
            raise InternalError(
                f"input {name} of the float decode step is not cache {cache} written by a DYNAMIC_UPDATE_SLICE"
            )
        pairs.append((name, tflite_file.text(graph.tensors[writes[index]].name)))
    if len(pairs) != len(cache_inputs):
        raise InternalError(f"the float decode step has {len(pairs)} cache inputs for {len(cache_inputs)} caches")
    return pairs


def int8_decode_step(
    program, samples: list[list[np.ndarray]], cache_ranges: list[tuple[float, float]], cache_names: list[str]
) -> Int8DecodeStep:
    """The decode `program` (mcu passes applied) as a strict int8 .tflite; see the module docstring."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.mcu.bias_quantization import drop_bias_quantization
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.generative.fc_as_conv import fully_connected_as_conv
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.edge.mcu.tflm_forms import tflm_forms
    from tpuedge.edge.mcu.tflm_model import external_buffers, inline_buffers
    from tpuedge.quantize.config import QuantConfig
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    base = float_tflite(program, target="mcu")
    config = QuantConfig(scheme="int8", io_dtype="integer", strict_int8=True, float_islands=False, per_channel=True)
    entries = quantizer_recipe(config)
    infos = LiteRTRunner(base).inputs  # the signature's input names, which the calibrator is fed by
    feed = [{info.name: np.asarray(x).astype(info.dtype) for info, x in zip(infos, sample)} for sample in samples]
    quantize = run_quantizer(base)
    with (
        timed("calibration (decode steps of the float IR)"),
        stage_progress(f"{program.name}: calibration on {len(feed)} decode step(s)"),
    ):
        quantize.calibrate(entries, feed)
    tied = {}
    for (cache_in, written), (low, high) in zip(cache_write_pairs(base, cache_names), cache_ranges):
        tied[cache_in] = tied[written] = (low, high)
    quantize.override_ranges(tied)
    with timed("quantization (int8 decode step)"):
        quantized = quantize(entries)
    moved = external_buffers(quantized)
    data = inline_buffers(quantized)
    if external_buffers(data):
        raise InternalError(
            f"{program.name}: buffers {external_buffers(data)} are still outside the flatbuffer after inlining"
        )
    data, forms = tflm_forms(data)
    model = tflite_file.read_model(data)
    convolutions = fully_connected_as_conv(model)  # TFLite-Micro's and LiteRT's FULLY_CONNECTED round apart
    drop_bias_quantization(model)
    data = tflite_file.write_model(model)
    _check_runs_on_tflm(program.name, data)
    recipe = {
        "scheme": "int8",
        "summary": "static int8: int8 weights (per channel) and activations, integer I/O; every op int8",
        "quantizer": "ai-edge-quantizer",
        "quantizer_recipe": entries,
        "calibration": {"source": "decode steps of the float IR over text (teacher-forced)", "steps": len(samples)},
        "tied_cache_ranges": {name: [round(lo, 6), round(hi, 6)] for name, (lo, hi) in zip(cache_names, cache_ranges)},
        **(
            {"capped_ranges": {k: [float(a), float(b)] for k, (a, b) in quantize.capped_ranges.items()}}
            if quantize.capped_ranges
            else {}
        ),
        **({"tflm_forms": forms} if forms else {}),
        "fully_connected_as_conv_2d": convolutions,
    }
    return Int8DecodeStep(data, base, recipe, len(moved))


_FIX = "replace the PyTorch op that lowers to it (see `tpuedge ops --target mcu`), or build for android, which runs float ops"


def _check_runs_on_tflm(name: str, tflite: bytes) -> None:
    """Every op has a TFLite-Micro kernel and none computes in float: one error naming them all.
    (Integer index ops, the cache write's PACK of its start, run as they are: TFLite-Micro's run
    of the step, next in the build, is what checks each kernel's types.)"""
    from tpuedge.edge.mcu.tflm_candidates import float_compute_ops
    from tpuedge.edge.mcu.tflm_model import ops_used
    from tpuedge.edge.mcu.tflm_ops import tflm_missing, tflm_ops

    ops = {o.name: o.count for o in ops_used(tflite)}
    known = tflm_ops()
    problems = [
        Problem("op", op, tflm_missing().get(op) or f"TFLite-Micro has no {op} kernel", _FIX, count)
        for op, count in sorted(ops.items())
        if op not in known
    ]
    problems += [
        Problem(
            "op",
            op,
            "ai-edge-quantizer has no int8 recipe for it, so it stayed float, and TFLite-Micro runs "
            "only integer graphs",
            _FIX,
            count,
        )
        for op, count in sorted(float_compute_ops(tflite).items())
    ]
    if problems:
        raise ProblemsError(
            f"{name}: the int8 decode step has ops TFLite-Micro can't run; nothing was written:", problems
        )
