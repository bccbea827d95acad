"""ai-edge-quantizer run on one float .tflite: calibrated once (global min/max over every sample,
cached), then quantized by as many recipes as asked; what it prints is held, and a failure is a
`QuantizerError` carrying it.
"""

from __future__ import annotations

import hashlib

from tpuedge.edge.tool_output import held_tool_output, tail
from tpuedge.shared_ir.errors import InternalError

__all__ = ["QuantizerError", "run_quantizer"]


class QuantizerError(InternalError):
    """ai-edge-quantizer failed on a float model our converter wrote; `log` is what it printed."""

    def __init__(self, step: str, error: BaseException, log: str):
        shown = tail(log)
        super().__init__(
            f"ai-edge-quantizer failed while {step} ({type(error).__name__}: {error})"
            + (f". It printed:\n{shown}" if shown else "; it printed nothing.")
        )
        self.step = step
        self.error = error
        self.log = log


def _quantizer_step(log: list[str], step: str, fn, *args, **kwargs):
    """Run one ai-edge-quantizer call with its stderr held (progress bars, the interpreter's
    native log lines): shown with TPUEDGE_VERBOSE=1, appended to `log`, and carried by the
    error, with what the earlier steps printed, if it fails."""
    from tpuedge.edge.litert.quantizer_compat import large_weights_sliced

    try:
        # per-channel weights over 32 MiB (edge/litert/large_weights.py), only while the quantizer runs
        with held_tool_output("ai-edge-quantizer") as printed, large_weights_sliced():
            result = fn(*args, **kwargs)
    except Exception as exc:
        log.append(getattr(exc, "tool_output", ""))
        raise QuantizerError(step, exc, "".join(log)) from exc
    log.append(printed[0])
    return result


class run_quantizer:  # noqa: N801 - a small stateful helper, used like a function
    """Quantize one float model with several recipes, calibrating once."""

    def __init__(self, float_tflite: bytes):
        from ai_edge_quantizer import quantizer

        self._float = bytes(float_tflite)
        self._quantizer = quantizer.Quantizer(bytearray(float_tflite))
        self._calibration = None
        self._estimated: dict[str, dict] = {}
        self.capped_ranges: dict[str, tuple[float, float]] = {}  # edge/litert/singular_ranges.py, set by calibrate
        self.log: list[str] = []  # what ai-edge-quantizer printed, step by step
        self.fused_lstm = None  # edge/fused_lstm_weights.FusedLSTMWeights, set by the conversion

    def calibrate(self, recipe: list[dict], samples: list[dict]) -> None:
        """Activation ranges over ALL samples (global min/max).

        ai-edge-quantizer's default is a moving average of per-sample ranges, which
        under-estimates the extremes and clips inputs the calibration data itself contains.
        """
        from ai_edge_quantizer import calibrator, recipe_manager
        from ai_edge_quantizer.utils import qsv_utils

        from tpuedge.edge.litert.litert_lowering import SIGNATURE_KEY
        from tpuedge.edge.litert.singular_ranges import cap_singular_ranges
        from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_array_tree, encode_array_tree

        def statistics() -> dict:
            manager = recipe_manager.RecipeManager()
            manager.load_quantization_recipe(recipe)
            calib = _quantizer_step(
                self.log,
                "loading the float model for calibration",
                calibrator.Calibrator,
                self._float,
                num_threads=1,
                qsv_update_func=qsv_utils.min_max_update,
            )
            _quantizer_step(
                self.log, f"calibrating on {len(samples)} sample(s)", calib.calibrate, {SIGNATURE_KEY: samples}, manager
            )
            return calib.get_model_qsvs()

        parts = {"float": hashlib.sha256(self._float).hexdigest(), "recipe": recipe, "samples": data_digest(samples)}
        calibration = cached_stage(  # per-tensor ranges, shared by every recipe of this float model
            "calibration", parts, statistics, encode=encode_array_tree, decode=decode_array_tree
        )
        self._calibration, self.capped_ranges = cap_singular_ranges(self._float, calibration)

    def estimate_ranges(self, samples: list[dict], methods: tuple[str, ...]) -> None:
        """Also calibrate each activation by `methods` (quantize/range_estimation.py), on the
        samples `calibrate` used; the model's outputs keep min/max (clipping a classifier's
        largest logit would clip the answer). After `calibrate`."""
        from tpuedge.edge.flatbuffer import tflite_file
        from tpuedge.edge.litert.activation_histograms import estimated_calibrations
        from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_array_tree, encode_array_tree

        def estimates() -> dict:
            graph = tflite_file.read_model(self._float).subgraphs[0]
            keep = {tflite_file.text(graph.tensors[i].name) for i in graph.outputs}
            return estimated_calibrations(self._float, samples, self._calibration, methods, keep)

        parts = {
            "float": hashlib.sha256(self._float).hexdigest(),
            "methods": list(methods),
            "samples": data_digest(samples),
        }
        self._estimated = cached_stage(
            "range_estimates", parts, estimates, encode=encode_array_tree, decode=decode_array_tree
        )

    def override_ranges(self, ranges: dict[str, tuple[float, float]]) -> None:
        """Replace calibrated [min, max] of the named tensors (trained ranges; after `calibrate`)."""
        import numpy as np

        qsvs = dict(self._calibration)
        for name, (lo, hi) in ranges.items():
            shape = np.shape(qsvs[name]["min"]) if name in qsvs else (1,)
            qsvs[name] = {
                **qsvs.get(name, {}),
                "min": np.full(shape, lo, np.float32),
                "max": np.full(shape, hi, np.float32),
            }
        self._calibration = qsvs

    def __call__(self, recipe: list[dict], ranges: str = "min-max") -> bytes:
        """The model quantized by `recipe`, with activation ranges by `ranges` (min/max, or a
        method `estimate_ranges` was given)."""
        calibration = self._calibration if ranges == "min-max" else self._estimated[ranges]
        self._quantizer.load_quantization_recipe(recipe)
        # enable_progress_bar does not reach its transformation step, which draws a bar on
        # stderr for models over 100 tensors: held like the rest of its output
        result = _quantizer_step(
            self.log,
            "quantizing with the recipe",
            self._quantizer.quantize,
            calibration,
            enable_progress_bar=False,
            enable_progress_report=False,
        )
        data = bytes(result.quantized_model)
        # the fused LSTMs, which ai-edge-quantizer leaves float: their planned int8 weights
        return self.fused_lstm.apply(data, recipe) if self.fused_lstm is not None else data
