"""`--quantize auto` on LiteRT: build every candidate scheme, measure it, keep the one the rule picks.

Each candidate is converted as `--quantize SCHEME` would convert it (the int8 one runs its
per-op precision search on the calibration samples, without the IR ranking), then run in the LiteRT interpreter on
the build's accuracy samples (held out from calibration, or --eval data) against the float IR,
and timed with `median_latency_ms` on one of them. `quantize.auto.choose_recipe` decides.

The latency table is a cached build stage keyed by the candidates' bytes, so a rebuild of the
same inputs reads the same numbers and picks the same model (byte-identical artifacts).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

from tpuedge.shared_ir.errors import BudgetError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.accuracy_samples import AccuracySamples
    from tpuedge.edge.litert.convert import ConvertedModel
    from tpuedge.quantize.budget import AccuracyBudget
    from tpuedge.quantize.config import QuantConfig
    from tpuedge.shared_ir.program import Program

__all__ = ["build_auto", "LATENCY_SECONDS"]

LATENCY_SECONDS = 2.0  # spent timing all candidates together


def build_auto(
    program: "Program",
    config: "QuantConfig",
    calibration,
    accuracy: "AccuracySamples",
    reference,
    labels,
    budget: "AccuracyBudget",
    *,
    target: str = "android",
) -> tuple["ConvertedModel", dict, dict, list[list[np.ndarray]]]:
    """(chosen model, recipe["auto"] entry, its accuracy_budget entry, its outputs on the samples).
    BudgetError (nothing written) when no candidate meets the budget and it may not be written below."""
    from tpuedge.edge.android.android_convert import convert_for_android
    from tpuedge.edge.litert.float_model import tflite_layout_inputs
    from tpuedge.edge.android.litert_latency import median_latency_ms
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner, ModelRunError
    from tpuedge.edge.litert.quantizer_refusal import QuantizerRefusal
    from tpuedge.quantize.rollout import budget_inputs, rollout_or_samples
    from tpuedge.quantize.auto import AutoCandidate, auto_report, auto_table, candidate_schemes, choose_recipe
    from tpuedge.quantize.budget import check_budget
    from tpuedge.shared_ir.cache_keys import cached_stage, decode_json, encode_json
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    samples = [tflite_layout_inputs(s, config.channels_last) for s in accuracy.samples]
    built: dict[str, ConvertedModel] = {}
    outputs: dict[str, list] = {}
    results = {}
    refused: dict[str, str] = {}  # scheme -> why LiteRT would not run its model
    not_quantized: dict[str, str] = {}  # scheme -> why ai-edge-quantizer could not make its model
    schemes = candidate_schemes(bool(calibration), config.integer_only)
    # the candidates that read the calibration samples: int8's ranges and search, and dynamic-int8's
    # float32-weights rung (the budget's samples are held out of them)
    searched = {"int8": {}, "dynamic-int8": {"budget_cosine": budget.min_cosine}}
    with stage_progress(f"{program.name}: --quantize auto", total=len(schemes) + 1) as step:
        for scheme in schemes:
            step(f"{scheme}: convert and measure")
            # the int8 candidate without the IR ranking and with one precision per op kind
            # (quantize/config.py: rank_points and group_by_kind say why)
            try:
                with timed(f"auto: {scheme} candidate"):
                    converted = convert_for_android(
                        program,
                        config.replace(scheme=scheme, rank_points=False, group_by_kind=True),
                        calibration if scheme in searched else None,
                        **searched.get(scheme, {}),
                    )
            except QuantizerRefusal as exc:  # the quantizer can't take this scheme's way: not a candidate
                not_quantized[scheme] = exc.reason
                continue
            try:
                with timed("auto: candidates' accuracy runs (LiteRT)"):
                    runner = LiteRTRunner(converted.tflite)
                    outputs[scheme] = rollout_or_samples(
                        lambda *s: runner.run(tflite_layout_inputs(list(s), config.channels_last)),
                        accuracy.samples,
                        budget.rollout,
                    )
            except ModelRunError as exc:  # an int8 kernel refused these values: not a candidate
                refused[scheme] = str(exc)
                continue
            results[scheme] = check_budget(
                budget,
                reference,
                outputs[scheme],
                labels=labels,
                inputs=budget_inputs(accuracy.kind, budget.rollout, len(samples)),
            )
            built[scheme] = converted
        step("latency")
        files = {scheme: c.tflite for scheme, c in built.items()}
        with timed("auto: candidates' latency (LiteRT)"):
            latency = cached_stage(  # timed once per set of candidate models (see the module docstring)
                "auto_latency",
                {"models": {s: hashlib.sha256(b).hexdigest() for s, b in files.items()}, "seconds": LATENCY_SECONDS},
                lambda: median_latency_ms(files, samples[0], LATENCY_SECONDS),
                encode=encode_json,
                decode=decode_json,
            )
    candidates = [
        AutoCandidate(
            scheme,
            len(files[scheme]),
            float(latency[scheme]),
            r.passed,
            r.sample_cosine,
            r.top1,
            tuple(r.failures),
            _detail(built[scheme].recipe),
        )
        for scheme, r in results.items()
    ]
    chosen = choose_recipe(candidates)
    written_below = chosen is None
    refused_lines = (
        ["LiteRT refused to run:", *(f"  {scheme}: {why}" for scheme, why in refused.items())] if refused else []
    )
    if not_quantized:
        refused_lines += [
            "ai-edge-quantizer could not make:",
            *(f"  {scheme}: {why}" for scheme, why in not_quantized.items()),
        ]
    if chosen is None:
        if not budget.allow_below or not candidates:
            table = auto_table(candidates, None) if candidates else []
            raise _auto_budget_error(program.name, target, budget, accuracy, table + refused_lines)
        chosen = max(candidates, key=lambda c: (min(c.sample_cosine), -c.bytes))  # the most accurate
    entry = auto_report(candidates, chosen, samples=len(samples), inputs=accuracy.kind)
    if "int8" in built:  # what every op at int8 scored before the search's remedies, whichever scheme won
        search = built["int8"].recipe.get("search") or {}
        entry["int8_search"] = {k: search.get(k) for k in ("metric", "samples", "all_int8_cosine", "final_cosine")}
    if refused:
        entry["refused_by_litert"] = refused
    if not_quantized:
        entry["not_quantized"] = not_quantized
    return (
        built[chosen.scheme],
        entry,
        results[chosen.scheme].to_json(written_below=written_below),
        outputs[chosen.scheme],
    )


def _detail(recipe: dict) -> str:
    kept = recipe.get("non_int8_ops") or []
    if recipe.get("scheme") == "dynamic-int8":
        return f"{len(kept)} weight tensor(s) in float32" if kept else ""
    if recipe.get("scheme") != "int8":
        return ""
    groups = [o for o in kept if o.get("kind") not in ("every_op", "ranked_weights")]
    every = {o["precision"] for o in kept if o.get("kind") == "every_op"}
    weights = [o for o in kept if o.get("kind") == "ranked_weights"]
    parts = (
        ([f"{len(groups)} op group(s) kept at int16/float"] if groups else [])
        + (["every activation at 16 bits"] if "int16" in every else [])
        + (["every op in float (weights int8)"] if "float" in every else [])
        + ([f"{len(weights)} weight tensor(s) in float32"] if weights else [])
    )
    return ", ".join(parts) or "every op int8"


def _auto_budget_error(name: str, target: str, budget, accuracy, table: list[str]) -> BudgetError:
    return BudgetError(
        "\n".join(
            [
                f"{name}: no recipe --quantize auto tried meets the accuracy budget ({budget.describe()}), so nothing was "
                "written and the output folder is as it was.",
                f"Measured with LiteRT on {accuracy.describe()}, against the float IR:",
                *table,
                "Try: more or more representative --calibration data or --eval data closer to real use, a lower --min-cosine "
                "if this error is acceptable, or --allow-below-budget to write the most accurate one anyway (marked below "
                "budget in its manifest).",
            ]
        )
    )
