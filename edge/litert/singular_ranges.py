"""The calibration of a float flatbuffer with each RSQRT output's range capped at what a quantized
input can give (quantize/singular_ranges.py says why)."""

from __future__ import annotations

import numpy as np

from tpuedge.quantize.singular_ranges import rsqrt_output_max

__all__ = ["cap_singular_ranges"]


def cap_singular_ranges(float_tflite: bytes, qsvs: dict) -> tuple[dict, dict[str, tuple[float, float]]]:
    """(a copy of `qsvs` (ai-edge-quantizer's calibration of `float_tflite`: tensor name ->
    {"min", "max"}) with each RSQRT output's max capped by `rsqrt_output_max` of its input's
    range, {tensor name: (max before, max after)} of those capped)."""
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    names = tflite_file.operator_names(model)
    capped, out = {}, dict(qsvs)
    for graph in model.subgraphs:
        for op in graph.operators or []:
            if names[op.opcodeIndex] != "RSQRT":
                continue
            source = tflite_file.text(graph.tensors[op.inputs[0]].name)
            target = tflite_file.text(graph.tensors[op.outputs[0]].name)
            if source not in out or target not in out:
                continue
            limit = rsqrt_output_max(np.min(out[source]["min"]), np.max(out[source]["max"]))
            high = np.asarray(out[target]["max"], np.float32)
            if np.max(high) > limit:
                out[target] = {**out[target], "max": np.minimum(high, np.float32(limit))}
                capped[target] = (float(np.max(high)), round(limit, 6))
    return out, capped
