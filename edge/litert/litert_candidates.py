"""The int8 precision search's backend for the LiteRT targets (quantize/search_backend.py): one
float .tflite's candidates quantized by ai-edge-quantizer recipes, run in LiteRT or the calling
target's runtime, and its op groups read from the flatbuffer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tpuedge.edge.litert.float_model import tflite_layout_inputs

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.search_backend import CandidateRuntime
    from tpuedge.shared_ir.program import Program

__all__ = ["LiteRTCandidates", "quantizer_samples"]


def quantizer_samples(samples, input_infos, channels_last: bool) -> list[dict]:
    """Program samples as ai-edge-quantizer's calibration takes them: by input name, in the
    .tflite's layout and dtypes."""
    out = []
    for sample in samples:
        arrays = tflite_layout_inputs(sample, channels_last)
        out.append({info.name: np.asarray(x).astype(info.dtype) for info, x in zip(input_infos, arrays)})
    return out


class LiteRTCandidates:
    """quantize.search_backend.CandidateBackend over `quantize` (run_quantizer(float_model),
    calibrated on `calibration_inputs`, the quantizer's samples) for `program` per `config`;
    `judge`: the calling target's check and runtime (mcu), else LiteRT scores the candidates."""

    quantizer = "ai-edge-quantizer"

    def __init__(
        self,
        program: "Program",
        config,
        float_model: bytes,
        quantize,
        *,
        target: str | None,
        judge: "CandidateRuntime | None" = None,
        calibration_inputs: list[dict] | None = None,
    ) -> None:
        self.program, self.config, self.float_model, self._quantize = program, config, float_model, quantize
        self.target, self.judge, self._calibration_inputs = target, judge, calibration_inputs
        self.runtime = "LiteRT" if judge is None else "the target's runtime"

    def layout_inputs(self, sample: list) -> list:
        return tflite_layout_inputs(sample, self.config.channels_last)

    def sensitive_groups(self):
        from tpuedge.edge.litert.sensitive_groups import find_sensitive_groups

        return find_sensitive_groups(self.float_model)

    def recipe(self, assignment: dict[str, str] | None = None, scopes: dict | None = None) -> list[dict]:
        from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe

        return quantizer_recipe(self.config, assignment, scopes)

    def quantize(self, entries: list[dict], ranges: str = "min-max") -> bytes:
        return self._quantize(entries, ranges)

    def estimate_ranges(self, methods: tuple[str, ...]) -> None:
        self._quantize.estimate_ranges(self._calibration_inputs, methods)

    def outputs(self, data: bytes, inputs: list) -> list | None:
        from tpuedge.edge.litert.litert_runtime import ModelRunError, run_samples
        from tpuedge.edge.mcu.tflm_runtime import TflmError

        try:
            return (self.judge.outputs if self.judge is not None else run_samples)(data, inputs)
        except (ModelRunError, TflmError):
            return None

    def converter_program(self) -> "Program":
        from tpuedge.edge.litert.litert_lowering import litert_ir_passes
        from tpuedge.shared_ir.program import Program

        return Program(litert_ir_passes(self.program.exported_program), name=self.program.name)

    def ranked_groups(self, ranking: list):
        from tpuedge.edge.litert.sensitive_groups import ranked_groups

        return ranked_groups(self.float_model, ranking)

    def weight_groups(self, ranking: list, elements_cap: int):
        from tpuedge.edge.litert.sensitive_groups import weight_groups

        return weight_groups(self.float_model, ranking, elements_cap)

    def every_op_types(self) -> list[tuple[str, str, int]]:
        from tpuedge.edge.litert.sensitive_groups import every_op_types

        return every_op_types(self.float_model)

    def every_op_group(self, types: list, excluded: frozenset[str]) -> tuple[Any, Any]:
        from tpuedge.edge.litert.sensitive_groups import every_op_group

        return every_op_group(types, excluded)

    def all_int8_of(self, program: "Program", calibration: list) -> bytes:
        from tpuedge.edge.litert.float_model import float_tflite
        from tpuedge.edge.litert.litert_runtime import LiteRTRunner
        from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
        from tpuedge.edge.litert.quantizer_runner import run_quantizer

        base = float_tflite(program, channels_last=self.config.channels_last, target=self.target)
        quantize = run_quantizer(base)
        entries = quantizer_recipe(self.config)
        quantize.calibrate(
            entries, quantizer_samples(calibration, LiteRTRunner(base).inputs, self.config.channels_last)
        )
        return quantize(entries)
