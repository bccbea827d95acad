"""One android conversion: program_to_tflite plus android's own IR rewrites (LSTM layers as
LiteRT's fused sequence op, in every scheme; more for static int8).

Used by a plain `--quantize SCHEME` build and by each of `--quantize auto`'s candidates, so the
two convert alike.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["convert_for_android", "android_rewrites", "int8_rewrites"]


def convert_for_android(program: "Program", config, calibration, **options: Any):
    """program_to_tflite, with android's own IR rewrites (`android_rewrites`; for static int8
    also `int8_rewrites`), the
    tensor names module scopes (edge/flatbuffer/tensor_names.py; a quantized model's shared by a scope's
    tensors) and a quantized model written again by tflite_file.write_model (equal vectors,
    strings and tables once); the recipe lists the rewrites."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.convert import program_to_tflite
    from tpuedge.edge.flatbuffer.tensor_names import ScopeNames, shorten_tensor_names

    program, rewrites = android_rewrites(program, config)
    if config.scheme == "int8":
        program, more = int8_rewrites(program)
        rewrites += more
    converted = program_to_tflite(program, config, calibration, target="android", **options)
    recipe = {**converted.recipe, "ir_rewrites": rewrites} if rewrites else converted.recipe
    # a float build writes float_tflite's model as it is (names unique scopes, renamed in place)
    tflite = shorten_tensor_names(
        converted.tflite, ScopeNames(program.exported_program), unique=config.scheme == "none"
    )
    if config.scheme != "none" and tflite is converted.tflite:  # as the quantizer wrote it: not compacted yet
        tflite = tflite_file.compact_model(tflite)
    return dataclasses.replace(converted, tflite=tflite, recipe=recipe)


def android_rewrites(program: "Program", config) -> tuple["Program", list[dict]]:
    """`program` with its LSTM layers as LiteRT's fused sequence LSTM where it computes what torch
    does (edge/litert/sequence_lstm.py), and the results of the pass if it changed something. The fused
    op computes in float, so not where the scheme asks for integer compute: a static int8 build
    without float ops (--strict-int8, or no float islands), whose layers are written out in int8
    ops (`int8_rewrites`), and dynamic-int8, whose written-out layers run LiteRT's hybrid
    FULLY_CONNECTED kernels (Resemblyzer: 8.2 ms per invoke, 20.5 ms fused in float)."""
    integer_compute = config.scheme == "dynamic-int8" or (
        config.scheme == "int8" and (config.strict_int8 or not config.float_islands)
    )
    if integer_compute or "aten.lstm.input" not in program.op_histogram:  # (its module registers a torch op: 25 ms)
        return program, []
    from tpuedge.edge.litert.sequence_lstm import FuseSequenceLSTM
    from tpuedge.shared_ir.program import Program

    ep, result = FuseSequenceLSTM()(program.exported_program)
    if not result.changed:
        return program, []
    return Program(ep, name=program.name), [result.to_json()]


def int8_rewrites(program: "Program") -> tuple["Program", list[dict]]:
    """`program` rewritten for LiteRT's static int8 recipe, same numbers, its own float model:
    - embedding tables as gathers, which the recipe stores in int8 (shared_ir/passes/embedding_gather.py;
      TFLite-Micro's int8 GATHER_ND over token ids does not run, so mcu folds its lookups instead);
    - GRU layers (and LSTM layers `android_rewrites` left: a build without float ops, a given
      state, ...) unrolled with the input projection hoisted out of the recurrence
      (shared_ir/passes/recurrent_layers.py, which mcu applies too). litert-torch's own unrolling
      adds the bias at every step, and an int8 FULLY_CONNECTED stores its bias as int32 on its
      input's scale: one int32 copy and its per-channel table per step and layer;
    - a step read from the unrolled sequence read from that step (shared_ir/passes/select_stacked.py).
    Returns (program, the results of the passes that changed something)."""
    from tpuedge.shared_ir.passes.embedding_gather import EmbeddingAsGather
    from tpuedge.shared_ir.passes.recurrent_layers import UnrollRecurrentLayers
    from tpuedge.shared_ir.passes.select_stacked import SelectFromStack
    from tpuedge.shared_ir.program import Program

    ep, results = program.exported_program, []
    for rewrite in (EmbeddingAsGather(), UnrollRecurrentLayers(), SelectFromStack()):
        ep, result = rewrite(ep)
        if result.changed:
            results.append(result.to_json())
    if not results:
        return program, []
    return Program(ep, name=program.name), results
