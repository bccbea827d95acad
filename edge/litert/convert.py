"""Program + QuantConfig (+ calibration) -> .tflite bytes and the recipe that made them.

STABLE INTERNAL API (every LiteRT-based target calls it, passing its own name):

    converted = program_to_tflite(program, QuantConfig(scheme="int8"), calibration, target="mcu")
    converted.tflite        # bytes of the final model
    converted.recipe        # dict: scheme, config, quantizer recipe, per-op decisions
    converted.float_tflite  # bytes of the float model it was quantized from

`calibration` is what `tpuedge.quantize.calibration.load_calibration` returns (a list of
samples, each one np.ndarray per Program input, in the Program's NCHW layout even with
channels_last). Scheme "int8" needs it; the others ignore it except for the recorded search.

Pipeline: the Program's ExportedProgram -> litert-torch (its decomposition table, FX passes,
flatbuffer export) -> float .tflite -> ai-edge-quantizer recipe (fp16 weights / dynamic int8 /
static int8 with a per-op precision search measured against the float IR).

Static int8's calibration: edge/litert/static_int8.py; its remedies and per-op precision search:
quantize/precision_search.py, over this backend's candidates (edge/litert/litert_candidates.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuedge.quantize.config import QuantConfig
from tpuedge.quantize.recipes import scheme_summary
from tpuedge.shared_ir.errors import InternalError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from tpuedge.quantize.search_backend import CandidateRuntime
    from tpuedge.shared_ir.program import Program

__all__ = ["ConvertedModel", "program_to_tflite"]


@dataclass(frozen=True)
class ConvertedModel:
    tflite: bytes
    recipe: dict
    float_tflite: bytes
    config: QuantConfig = field(default_factory=QuantConfig)


def program_to_tflite(
    program: "Program",
    config: QuantConfig,
    calibration: list[list[np.ndarray]] | None = None,
    *,
    report_strict_cost: bool = False,
    target: str | None = None,
    trained_ranges: Any = None,
    budget_cosine: float | None = None,
    equalize: bool = True,
    candidates: "CandidateRuntime | None" = None,
) -> ConvertedModel:
    """Lower `program` to LiteRT and quantize it per `config` (see the module docstring).

    report_strict_cost (strict int8 only): also run the default per-op search and record, in
    recipe["strict_int8_cost"], what the mixed int8/int16/float recipe scores on the same
    samples next to the strict one (costs one search; a target that reports that cost asks for it).
    target: the calling target's name, for its messages and its check when litert-torch fails.
    trained_ranges: the ActivationRanges a quantization-aware training gave the program (int8
    only): they replace the calibrated range of every tensor they reach, and no per-op search runs.
    budget_cosine: the build's accuracy budget (worst output's mean per-sample cosine). Where the
    search ends below it (plus a margin for held-out samples), the top-ranked points become
    float islands (quantize/precision_search.py); None: no such last resort. dynamic-int8 given
    `calibration` (samples the budget does not read) and a budget measures its model on them,
    and below the budget gives the costliest weight tensors' ops float32 (quantize/float_weights.py).
    equalize: where all-int8 misses the target, also measure the program after cross-layer
    equalization (quantize/precision_search.py); False for that program itself.
    candidates: the calling target's own judge of the int8 search's candidates (quantize/search_backend.
    CandidateRuntime): its check, which refuses a recipe the target can't run (mcu: a float op,
    or an int16 kernel TFLite-Micro lacks), and its runtime, which scores them instead of
    LiteRT (mcu: TFLite-Micro, whose int16 kernels are not LiteRT's).
    """
    if config.scheme == "auto":  # a choice among conversions, made by the target (edge/android/android_auto.py)
        raise InternalError(
            "program_to_tflite converts one scheme; resolve --quantize auto with edge.android_auto.build_auto"
        )
    from tpuedge.edge.litert.float_model import float_tflite

    base = float_tflite(program, channels_last=config.channels_last, target=target)
    recipe: dict = {
        "scheme": config.scheme,
        "config": config.to_json(),
        "summary": scheme_summary(config.scheme, per_channel=config.per_channel, io_dtype=config.io_dtype),
        "lowering": "litert-torch pre_convert_decomp + FX passes + litert_converter (from the Program's ExportedProgram)",
    }
    if config.scheme == "none":
        recipe["quantizer_recipe"] = []
        recipe["non_int8_ops"] = []
        return ConvertedModel(base, recipe, base, config)

    from tpuedge.edge.litert.quantizer_runner import QuantizerError  # here: a float build never pays for the quantizer
    from tpuedge.edge.litert.quantizer_refusal import quantizer_refusal

    try:
        return _quantized(
            program,
            config,
            calibration,
            base,
            recipe,
            report_strict_cost=report_strict_cost,
            target=target,
            trained_ranges=trained_ranges,
            budget_cosine=budget_cosine,
            equalize=equalize,
            candidates=candidates,
        )
    except QuantizerError as exc:  # the float model converted; the quantizer can't take some of its ops
        raise quantizer_refusal(program.name, target, config.scheme, base, exc) from exc


def _quantized(
    program,
    config,
    calibration,
    base: bytes,
    recipe: dict,
    *,
    report_strict_cost,
    target,
    trained_ranges,
    budget_cosine,
    equalize,
    candidates,
) -> ConvertedModel:
    """program_to_tflite's quantization of `base`, the program's float model."""
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.shared_ir.cache_keys import cached_stage

    quantize = run_quantizer(base)
    if config.scheme in ("int8", "dynamic-int8"):  # LSTM layers LiteRT runs whole (edge/litert/sequence_lstm.py)
        from tpuedge.edge.litert.static_int8 import fused_lstm_plan

        quantize.fused_lstm = fused_lstm_plan(program, config, calibration, base, budget_cosine)
        if quantize.fused_lstm is not None:
            recipe["fused_lstm_weights"] = quantize.fused_lstm.to_json()
    if config.scheme in ("fp16", "dynamic-int8"):
        entries = quantizer_recipe(config)
        recipe["quantizer_recipe"] = entries
        recipe["quantizer"] = "ai-edge-quantizer"
        quantized = cached_stage(
            "quantized", {"float": hashlib.sha256(base).hexdigest(), "recipe": entries}, lambda: quantize(entries)
        )
        if config.scheme == "dynamic-int8" and calibration and budget_cosine is not None and config.float_islands:
            from tpuedge.edge.litert.litert_candidates import LiteRTCandidates
            from tpuedge.quantize.float_weights import dynamic_int8_weights

            backend = LiteRTCandidates(program, config, base, quantize, target=target)
            quantized = dynamic_int8_weights(program, config, calibration, backend, quantized, recipe, budget_cosine)
        return ConvertedModel(quantized, recipe, base, config)

    from tpuedge.edge.litert.static_int8 import static_int8
    from tpuedge.quantize.search_backend import Equalized

    result = static_int8(
        program,
        config,
        calibration,
        base,
        recipe,
        quantize,
        report_strict_cost=report_strict_cost,
        target=target,
        trained_ranges=trained_ranges,
        budget_cosine=budget_cosine,
        equalize=equalize,
        candidates=candidates,
    )
    if isinstance(result, Equalized):  # converted in the user's program's place (the recipe says so)
        converted = program_to_tflite(
            result.program,
            config,
            calibration,
            report_strict_cost=report_strict_cost,
            target=target,
            budget_cosine=budget_cosine,
            equalize=False,
            candidates=candidates,
        )
        converted.recipe["cross_layer_equalization"] = result.report
        return converted
    tflite, recipe = result
    return ConvertedModel(tflite, recipe, base, config)
