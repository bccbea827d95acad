"""Static int8 for the LiteRT targets: calibration in ai-edge-quantizer, trained ranges, and the
precision search (quantize/precision_search.py) over this backend's candidates
(edge/litert/litert_candidates.py); and the fused LSTMs' weights plan.

`program_to_tflite` (edge/litert/convert.py) hands its int8 conversions here, with the float model
and ai-edge-quantizer session it made.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from tpuedge.edge.litert.float_model import tflite_layout_inputs
from tpuedge.shared_ir.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.search_backend import CandidateRuntime, Equalized
    from tpuedge.shared_ir.program import Program

__all__ = ["static_int8", "fused_lstm_plan"]


def static_int8(
    program: "Program",
    config,
    calibration,
    base: bytes,
    recipe: dict,
    quantize,
    *,
    report_strict_cost: bool,
    target: str | None,
    trained_ranges: Any,
    budget_cosine: float | None,
    equalize: bool,
    candidates: "CandidateRuntime | None" = None,
) -> "tuple[bytes, dict] | Equalized":
    """(the int8 model of `program`, its recipe) from its float model `base` and `quantize`
    (run_quantizer(base)); `recipe` is the conversion's record so far, completed in place. Or
    `Equalized` where the program after cross-layer equalization quantizes better. Options as
    `program_to_tflite` documents them."""
    from tpuedge.edge.litert.litert_candidates import LiteRTCandidates, quantizer_samples
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.quantize.precision_search import search_precisions
    from tpuedge.quantize.search_score import rounded
    from tpuedge.shared_ir.progress import stage_progress

    if not calibration:
        raise UserError(
            f"--quantize int8 needs calibration data to set activation ranges, and none was given for {program.name}; "
            "pass --calibration data.npz (arrays keyed by input name), a .npy, a folder, or module:function."
        )
    float_runner = LiteRTRunner(base)
    # trained ranges replace every calibrated one: a single sample gives the quantizer its entries
    cal_samples = quantizer_samples(
        calibration[:1] if trained_ranges is not None else calibration, float_runner.inputs, config.channels_last
    )
    all_int8 = quantizer_recipe(config)
    with stage_progress(f"{program.name}: calibration on {len(cal_samples)} sample(s)"):
        quantize.calibrate(all_int8, cal_samples)
    if quantize.capped_ranges:  # RSQRT outputs whose float range no quantized input can reach
        recipe["capped_ranges"] = {
            name: [rounded(before), rounded(after)] for name, (before, after) in quantize.capped_ranges.items()
        }
    if trained_ranges is not None:
        return _with_trained_ranges(program, config, quantize, base, calibration, trained_ranges, recipe)
    backend = LiteRTCandidates(
        program, config, base, quantize, target=target, judge=candidates, calibration_inputs=cal_samples
    )
    return search_precisions(
        program,
        config,
        calibration,
        backend,
        recipe,
        report_strict_cost=report_strict_cost,
        budget_cosine=budget_cosine,
        equalize=equalize,
    )


def _with_trained_ranges(
    program, config, quantize, base: bytes, calibration, trained, recipe: dict
) -> tuple[bytes, dict]:
    """All int8, with every activation range the trained one (a tensor none reaches is an error)."""
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.trained_ranges import require_complete, tensor_ranges
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest

    placed = tensor_ranges(base, program, trained)
    require_complete(placed, program.name)  # so the samples the build checks on set no range
    quantize.override_ranges(placed.ranges)
    entries = quantizer_recipe(config)
    parts = {
        "float": hashlib.sha256(base).hexdigest(),
        "recipe": entries,
        "ranges": trained.digest,
        "calibration": data_digest(calibration),
    }
    data = cached_stage("quantized", parts, lambda: quantize(entries))
    recipe.update(
        {
            "quantizer": "ai-edge-quantizer",
            "quantizer_recipe": entries,
            "activation_ranges": {"source": trained.source, "sha256": trained.digest, **placed.summary()},
            "non_int8_ops": [],
        }
    )
    return data, recipe


def fused_lstm_plan(program, config, calibration, base: bytes, budget_cosine: float | None):
    """edge/litert/fused_lstm_weights.py's plan for the fused LSTMs' weights of `base` in a quantized build
    (None: there are none), measured on the search's samples. Their int8 may cost half of what
    the build's aim leaves (its budget plus the held-out margin, else the search's target):
    the other half is the rest of the model's."""
    from tpuedge.edge.litert.fused_lstm_weights import FusedLSTMWeights, has_fused_lstm, plan_fused_lstm_weights
    from tpuedge.quantize.search_settings import HELD_OUT_MARGIN, search_samples
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_json, encode_json
    from tpuedge.shared_ir.stage_times import timed

    if not has_fused_lstm(base):
        return None
    aim = min(budget_cosine + HELD_OUT_MARGIN, 1.0) if budget_cosine is not None else config.target_cosine
    eval_samples = search_samples(program, calibration) if calibration else []
    eval_inputs = [tflite_layout_inputs(s, config.channels_last) for s in eval_samples]

    def plan() -> dict | None:
        found = plan_fused_lstm_weights(base, eval_inputs, (1 - aim) / 2)
        return None if found is None else {**asdict(found), "float32": sorted(found.float32)}

    parts = {"float": hashlib.sha256(base).hexdigest(), "samples": data_digest(eval_samples), "aim": aim}
    with timed("fused LSTM weights: int8 where they cost little"):
        found = cached_stage("fused_lstm_weights", parts, plan, encode=encode_json, decode=decode_json)
    if found is None:
        return None
    return FusedLSTMWeights(
        **{**found, "names": tuple(found["names"]), "float32": frozenset(tuple(p) for p in found["float32"])}
    )
