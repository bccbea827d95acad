"""Histograms of a float flatbuffer's activations over the calibration samples, and the ranges
quantize/range_estimation.py reads from them, in the form ai-edge-quantizer takes its
calibration (tensor name -> {"min", "max"}).

The float model runs in LiteRT with every intermediate tensor kept
(`litert_runtime.preserving_interpreter`), one sample at a time; each tensor's values are
counted over the [min, max] that min/max calibration found, so no sample's values are stored.
"""

from __future__ import annotations

import numpy as np

from tpuedge.edge.litert.litert_runtime import preserving_interpreter
from tpuedge.edge.tool_output import held_tool_output
from tpuedge.quantize.range_estimation import Histogram, estimate_range

__all__ = ["estimated_calibrations"]


def estimated_calibrations(
    float_tflite: bytes, samples: list[dict], min_max: dict, methods: tuple[str, ...], keep: set[str]
) -> dict[str, dict]:
    """method -> a copy of `min_max` (ai-edge-quantizer's calibration of `float_tflite` on
    `samples`) with each per-tensor activation range replaced by `method`'s estimate. Tensors
    named in `keep` (the model's outputs) and per-channel entries keep min/max."""
    from tpuedge.edge.litert.litert_lowering import SIGNATURE_KEY

    float_tflite = bytes(float_tflite)  # alive while the interpreter reads it
    interpreter = preserving_interpreter(float_tflite)
    index = {}
    for detail in interpreter.get_tensor_details():
        index.setdefault(detail["name"], []).append(detail["index"])
    histograms: dict[str, tuple[int, Histogram]] = {}
    for name, qsv in min_max.items():
        if name in keep or len(index.get(name, ())) != 1 or np.size(qsv.get("min")) != 1:
            continue
        histograms[name] = (index[name][0], Histogram(float(np.min(qsv["min"])), float(np.max(qsv["max"]))))
    run = interpreter.get_signature_runner(SIGNATURE_KEY)
    for sample in samples:
        with held_tool_output("LiteRT"):
            run(**sample)
        for tensor, histogram in histograms.values():
            histogram.add(interpreter.get_tensor(tensor))
    result = {}
    for method in methods:
        calibration = dict(min_max)
        for name, (_, histogram) in histograms.items():
            low, high = estimate_range(histogram, method)
            shape = np.shape(min_max[name]["min"])
            calibration[name] = {
                **min_max[name],
                "min": np.full(shape, low, np.float32),
                "max": np.full(shape, high, np.float32),
            }
        result[method] = calibration
    return result
