"""Static int8 for the LiteRT targets: calibration, measured remedies and the per-op precision search.

`program_to_tflite` (edge/litert/convert.py) hands its int8 conversions here, with the float model
and ai-edge-quantizer session it made. Every candidate recipe is quantized and run in LiteRT
against the float IR on calibration samples; the search never keeps a recipe scoring below
one it measured (quantize/recipes.py chooses).

Static int8, where all-int8 misses the target, measures remedies before the search: estimated
activation ranges (MSE, percentile) and cross-layer equalization of conv/linear pairs across
a relu (shared_ir/passes/cross_layer_equalization.py). Its last rungs (android) are every op in
float with int8 weights, then float32 weights for the weight tensors whose int8 values cost most. Each is kept only if it scores better;
an equalized program is then converted in the user's program's place (the manifest says so,
and per-layer verify compares against it).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuedge.edge.litert.float_model import float_tflite, tflite_layout_inputs
from tpuedge.quantize.recipes import (
    FLOAT_FROM_THE_START,
    SENSITIVE_KINDS,
    PrecisionPlan,
    choose_precisions,
    merge_by_kind,
    upgrade_ranked,
)
from tpuedge.shared_ir.errors import InternalError, UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.metrics import AccuracySummary
    from tpuedge.shared_ir.program import Program

__all__ = ["static_int8", "dynamic_int8_weights", "CandidateRuntime", "Equalized", "search_score", "SEARCH_SAMPLES"]

# At most this many calibration samples are used to measure candidate recipes; fewer for a
# model of LARGE_MODEL_PARAMETERS or more, where one candidate's LiteRT run costs 0.1-0.2 s per
# sample (a 22M-parameter encoder with int16 and float islands) and the search measures ~100.
SEARCH_SAMPLES = 64
# activation-range estimates measured against min/max when all-int8 misses the target; one
# is kept only if it scores _MIN_RANGE_GAIN better (a tie keeps min/max, which clips nothing)
ESTIMATED_RANGES = ("mse", "percentile")
_MIN_RANGE_GAIN = 1e-4
# cross-layer equalization is kept only if its all-int8 beats the best ranges' by this much
# (a near tie keeps the user's own weights, which per-layer verify compares one for one)
_MIN_EQUALIZED_GAIN = 1e-3
# the float-island last resort aims this far above the budget on the search's own samples: the
# held-out samples the budget reads score lower (ShuffleNetV2-x0.5 by 0.001, MiniLM's old recipe
# passed 8 held-out samples and scored 0.9885 on 32 others)
_HELD_OUT_MARGIN = 0.0025
# the whole-model int16 rung: how many times an op type the target refuses at 16 bits is left
# int8 and the rest measured again, and how much it must gain to be kept
_EVERY_OP_TRIES = 3
_MIN_EVERY_OP_GAIN = 1e-4
# the op types the rung returns to int8 where it has score to spare: table lookups first (an
# embedding table is most of a text model's bytes: MiniLM-L6's every-op-float recipe kept its
# 30522x384 table float, 57.9 MB against 22.7 MB), then the compute-heavy ops (most of its time)
_TABLE_OPS = ("GATHER_ND", "GATHER", "EMBEDDING_LOOKUP")
_COMPUTE_HEAVY_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV")
# the float32-weights rung's extra bytes (3 an element over int8) stay within this share of the
# parameter count plus this floor: the size goal's slack (int8 size <= 1.1x parameter bytes + 32 KiB)
FLOAT_WEIGHTS_BYTES_SHARE = 0.1
FLOAT_WEIGHTS_BYTES_FLOOR = 32 * 1024
# from this many op groups on (android), the whole-model float rung is measured before them
EVERY_OP_FIRST_GROUPS = 8
LARGE_MODEL_PARAMETERS = 5_000_000
LARGE_MODEL_SEARCH_SAMPLES = 16
# The op-group search's one-group-at-a-time candidates (one per group; two while it measured
# int16 and float on android: 78 of the 117 MiniLM measured) only order the groups, so they
# run on 1/SCREENING_SHARE of the samples (at least
# MIN_SCREENING_SAMPLES); every upgrade kept is measured on all of them.
SCREENING_SHARE = 4
MIN_SCREENING_SAMPLES = 2
_SCREENED = "screened on"  # in a screening candidate's key, the table of recipes measured


@dataclass(frozen=True)
class CandidateRuntime:
    """A target's own judge of the int8 search's candidates, where LiteRT is not its runtime (mcu:
    TFLite-Micro, edge/mcu/tflm_candidates.py). `problem`: bytes -> why the target can't run an
    upgraded recipe, or None (the search scores a refused one as failed); `outputs`: (bytes,
    samples) -> outputs, which every candidate is scored by instead of LiteRT; `floor`: bytes ->
    None, given the all-int8 candidate before it is scored, raises where even it can't serve
    (mcu: the board's RAM). All-int8 is the least any recipe of the search needs (its upgrades
    widen activations to 16 bits), so a model that fits no board is answered after one
    conversion, not after a search: DeiT-tiny on esp32s3 searched int16 candidates in
    TFLite-Micro for over 20 minutes before the board said no."""

    target: str
    problem: "Callable[[bytes], str | None]"
    outputs: "Callable[[bytes, list], list]"
    floor: "Callable[[bytes], None] | None" = None


@dataclass(frozen=True)
class Equalized:
    """`static_int8`'s answer where cross-layer equalization won: convert `program` instead."""

    program: "Program"
    report: dict


class _MeasuredCandidates:
    """The candidates one search measured, by recipe key: how to quantize each again and the
    sha256 of its bytes. Only the newest candidate's bytes stay in memory (a 22M-parameter
    encoder's ~100 candidates held 2.4 GB; the newest is the one kept more often than not); any
    other is quantized again when asked for, and must be the very model that was measured."""

    def __init__(self) -> None:
        self._again: dict[str, tuple[Callable[[], bytes], str]] = {}
        self._newest: tuple[str, bytes] | None = None

    def add(self, key: str, data: bytes, quantize_again: Callable[[], bytes], digest: str | None = None) -> None:
        self._again[key] = (quantize_again, digest or hashlib.sha256(data).hexdigest())
        self._newest = (key, data)

    def bytes_of(self, key: str, what: str) -> bytes:
        if self._newest is not None and self._newest[0] == key:
            return self._newest[1]
        quantize_again, digest = self._again[key]
        data = quantize_again()
        if hashlib.sha256(data).hexdigest() != digest:
            raise InternalError(
                f"ai-edge-quantizer gave different bytes for {what} the second time it quantized it; the int8 "
                "search assumes one recipe always gives one model."
            )
        return data


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
    candidates: CandidateRuntime | None = None,
) -> "tuple[bytes, dict] | Equalized":
    """(the int8 model of `program`, its recipe) from its float model `base` and `quantize`
    (run_quantizer(base)); `recipe` is the conversion's record so far, completed in place. Or
    `Equalized` where the program after cross-layer equalization quantizes better. Options as
    `program_to_tflite` documents them."""
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.sensitive_groups import find_sensitive_groups
    from tpuedge.quantize.metrics import AccuracySummary
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_blob_and_json, encode_blob_and_json
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    if not calibration:
        raise UserError(
            f"--quantize int8 needs calibration data to set activation ranges, and none was given for {program.name}; "
            "pass --calibration data.npz (arrays keyed by input name), a .npy, a folder, or module:function."
        )
    float_runner = LiteRTRunner(base)
    # trained ranges replace every calibrated one: a single sample gives the quantizer its entries
    cal_samples = _quantizer_samples(
        calibration[:1] if trained_ranges is not None else calibration, float_runner.inputs, config.channels_last
    )
    groups, scopes = find_sensitive_groups(base)
    # groups of the kinds float from the start (quantize/recipes.py), where floats are allowed
    fixed = (
        {g.key: "float" for g in groups if g.kind in FLOAT_FROM_THE_START}
        if config.float_islands and not config.strict_int8
        else {}
    )
    fixed_ops = [
        {"group": g.key, "kind": g.kind, "precision": "float", "ops": list(g.ops), "why": SENSITIVE_KINDS[g.kind]}
        for g in groups
        if g.key in fixed
    ]
    groups = [g for g in groups if g.key not in fixed]
    all_int8 = quantizer_recipe(config)
    with stage_progress(f"{program.name}: calibration on {len(cal_samples)} sample(s)"):
        quantize.calibrate(all_int8, cal_samples)
    if quantize.capped_ranges:  # RSQRT outputs whose float range no quantized input can reach
        recipe["capped_ranges"] = {
            name: [_round(before), _round(after)] for name, (before, after) in quantize.capped_ranges.items()
        }
    if trained_ranges is not None:
        return _with_trained_ranges(program, config, quantize, base, calibration, trained_ranges, recipe)

    eval_samples = _search_samples(program, calibration)
    reference = functools.cache(
        lambda: [program.run(*s) for s in eval_samples]
    )  # not run when every candidate is cached
    eval_inputs = [tflite_layout_inputs(s, config.channels_last) for s in eval_samples]
    built = _MeasuredCandidates()
    measured: dict = {}  # recipe key -> AccuracySummary; the search re-asks for recipes it has measured
    refused: dict[str, str] = {}  # recipe key -> why the target can't run it (`candidates.problem`)
    # (sha256 of a candidate's bytes, samples) -> its score: different recipes can give one model (a
    # group whose ops the ranked points already made int16; 18 of MiniLM-L6's 105 candidates)
    scored: dict[tuple[str, int], dict] = {}

    candidate_parts = {
        "ir": program.fingerprint,
        "float": hashlib.sha256(base).hexdigest(),
        "calibration": data_digest(calibration),
        "channels_last": config.channels_last,
    }

    step = None  # the search's progress row, set below
    chosen = {"ranges": "min-max"}  # the activation-range method, chosen by measurement below
    floor_checked = False  # `candidates.floor` is asked of the first all-int8 candidate only

    def check_floor(data: bytes) -> None:
        nonlocal floor_checked
        if candidates is not None and candidates.floor is not None and not floor_checked:
            candidates.floor(data)
            floor_checked = True

    def measure(assignment: dict[str, str], ranges: str | None = None, samples: int | None = None):
        ranges = ranges or chosen["ranges"]
        count = min(samples or len(eval_inputs), len(eval_inputs))
        key = _key(assignment, ranges) + ("" if count == len(eval_inputs) else f" [{_SCREENED} {count} samples]")
        if key not in measured:
            step(key or "all int8")
            entries = quantizer_recipe(config, {**fixed, **assignment}, scopes)
            # an upgraded recipe can give ops the target has no kernel for (all-int8 is the
            # model's own answer, which the build checks and reports op by op, however the
            # assignment spells it: {} or every group named "int8")
            upgraded = any(p != "int8" for p in {**fixed, **assignment}.values())

            digest: list[str] = []  # the bytes' sha256, taken once (23 MB a candidate on MiniLM)

            def build_and_score() -> tuple[bytes, dict]:
                with timed("int8 search: ai-edge-quantizer"):
                    data = quantize(entries, ranges)
                digest.append(hashlib.sha256(data).hexdigest())
                same = (digest[0], count)
                if same not in scored:
                    if not upgraded:
                        check_floor(data)  # before it is scored: a model over the board ends here
                    problem = candidates.problem(data) if candidates is not None and upgraded else None
                    if problem is not None:
                        scored[same] = {**asdict(AccuracySummary.failed_to_run(count)), "refused": problem}
                    else:
                        with timed(
                            "int8 search: candidates in LiteRT"
                            if candidates is None
                            else "int8 search: candidates in the target's runtime"
                        ):
                            scored[same] = asdict(
                                _score_candidate(
                                    data,
                                    eval_inputs[:count],
                                    lambda: reference()[:count],
                                    candidates and candidates.outputs,
                                )
                            )
                return data, scored[same]

            parts = {
                **candidate_parts,
                "recipe": entries,
                **({"ranges": ranges} if ranges != "min-max" else {}),
                **({"samples": count} if count != len(eval_inputs) else {}),
                **(
                    {"target_check": candidates.target, "scored_in": candidates.target}
                    if candidates is not None
                    else {}
                ),
            }
            data, score = cached_stage(
                "quant_candidate", parts, build_and_score, encode=encode_blob_and_json, decode=decode_blob_and_json
            )
            if not upgraded:
                check_floor(data)  # a cache hit was not checked in build_and_score
            score = dict(score)
            if "refused" in score:
                refused[key] = score.pop("refused")
            # (a cache hit was not quantized here: its digest is taken from the bytes)
            built.add(key, data, lambda: quantize(entries, ranges), digest[0] if digest else None)
            measured[key] = AccuracySummary(**score)
        return measured[key]

    def evaluate(assignment: dict[str, str], ranges: str | None = None, samples: int | None = None) -> float:
        # the budget reads every output's mean per-sample cosine: the search aims at it too, so it
        # never stops on a score the budget does not read
        return search_score(measure(assignment, ranges, samples), config.target_top1)

    screening_samples = max(MIN_SCREENING_SAMPLES, len(eval_inputs) // SCREENING_SHARE)

    # where all-int8 with min/max ranges misses the target, the ranges estimated from histograms
    # are measured too (quantize/range_estimation.py), and the best all-int8 sets the search's ranges
    with stage_progress(f"{program.name}: all-int8 candidate", total=1) as step:  # noqa: F811 - evaluate() reads the row it is given
        range_scores = {"min-max": evaluate({})}
    if range_scores["min-max"] < config.target_cosine:
        with stage_progress(
            f"{program.name}: activation ranges from histograms", total=1 + len(ESTIMATED_RANGES)
        ) as step:
            step("histograms of the calibration activations")
            quantize.estimate_ranges(cal_samples, ESTIMATED_RANGES)
            for method in ESTIMATED_RANGES:
                range_scores[method] = evaluate({}, method)
                if range_scores[method] > range_scores[chosen["ranges"]] + _MIN_RANGE_GAIN:
                    chosen["ranges"] = method

    # where all-int8 misses the target, the same function with its channels equalized across
    # relus may quantize better: measured, and converted instead when it does
    best_all_int8 = max(range_scores.values())
    if equalize and best_all_int8 < config.target_cosine:
        with stage_progress(f"{program.name}: all-int8 after cross-layer equalization", total=1) as step:
            step("equalize, convert, calibrate, score")
            equalized = _equalized_candidate(
                program,
                config,
                calibration,
                eval_inputs,
                reference,
                best_all_int8,
                target,
                candidates and candidates.outputs,
            )
        if equalized is not None and equalized["report"]["kept"]:
            return Equalized(equalized["program"], equalized["report"])
        if equalized is not None:
            recipe["cross_layer_equalization"] = equalized["report"]

    # where all-int8 misses the target, the IR's costliest points are upgraded first (float
    # islands on android, int16 on mcu; not under --strict-int8, whose reported cost compares it
    # with this default recipe)
    ranked: dict = {"assignment": {}, "report": None, "non_int8": []}
    if config.rank_points and (not config.strict_int8 or report_strict_cost):
        all_int8 = range_scores[chosen["ranges"]]
        if all_int8 < config.target_cosine:
            ranked = _upgrade_ranked_points(
                program, base, calibration, eval_samples, scopes, evaluate, all_int8, config
            )

    # the groups searched: each op group, or one per kind (config.group_by_kind)
    search_groups, expand = merge_by_kind(groups) if config.group_by_kind else (groups, dict)

    def budget_score(assignment: dict[str, str]) -> float:  # the budget's own metrics
        summary = measure(assignment)
        cosine = summary.centered_cosine if summary.sample_cosine is None else summary.sample_cosine
        return _top1_scaled(cosine, summary.top1_agreement, config.target_top1)

    # the last resorts aim this far above the budget on the search's own samples, or at the target
    if budget_cosine is None:
        aim, score, metric = config.target_cosine, evaluate, "the search's score"
    else:
        aim, score, metric = (
            min(budget_cosine + _HELD_OUT_MARGIN, 1.0),
            budget_score,
            "the budget's metric (mean per-sample cosine)",
        )

    # Where float islands are allowed and the op groups are many (a transformer's norms, GELUs and
    # attention products, 3-5 a layer), the whole-model float rung is measured first: a handful of
    # candidates against one per group and more. Where it meets the aim the group search is not run
    # (MiniLM-L6 ended on this rung after ~45 group candidates, ~15 s of a 38 s build).
    def every_op_rung(start: dict[str, str]) -> dict:
        """`_every_op` on top of `start`, its progress shown; the recipe's report."""
        nonlocal step
        with stage_progress(
            f"{program.name}: every op at {config.upgrade_precision}",
            total=_EVERY_OP_TRIES + len(_TABLE_OPS) + len(_COMPUTE_HEAVY_OPS),
        ) as step:
            report = _every_op(base, start, score, aim, refused, scopes, chosen["ranges"], config.upgrade_precision)
        return {"metric": f"{metric}, on calibration samples", "aim": _round(aim), **report}

    every_op = None
    if (
        not config.strict_int8
        and config.float_islands
        and len(search_groups) >= EVERY_OP_FIRST_GROUPS
        and score(ranked["assignment"]) < aim
    ):
        early = every_op_rung(ranked["assignment"])
        if early["kept"] and early["cosine"] >= aim:
            every_op = {
                **early,
                "before_op_groups": f"measured before the {len(search_groups)} op groups, which it made unneeded",
            }

    def search(*, strict: bool):
        """choose_precisions over the groups: on top of the upgraded ranked points unless `strict`,
        the one-group-at-a-time candidates screened on fewer samples where there are enough."""
        start = {} if strict else ranked["assignment"]

        def scored(samples: int | None = None):
            return lambda assignment: evaluate({**start, **expand(assignment)}, samples=samples)

        screen = scored(screening_samples) if screening_samples < len(eval_inputs) else None
        return choose_precisions(
            search_groups,
            scored(),
            strict_int8=strict,
            upgrade=config.upgrade_precision,
            target_cosine=config.target_cosine,
            screen=screen,
        )

    # at most: all-int8 (also screened), each group at its upgrade, then each group's
    # upgrade in turn, and the best single upgrade measured on all samples
    mixed = None
    if every_op is not None:  # the float rung met the aim on top of the ranked points
        plan = PrecisionPlan({}, [], None, None, 0)
        ranked_ops = ranked["non_int8"] + [every_op.pop("entry")]
        assignment = every_op.pop("assignment")
        final_cosine = evaluate(assignment)
    else:
        with stage_progress(
            f"{program.name}: int8 search over {len(search_groups)} op group(s)", total=3 + 2 * len(search_groups)
        ) as step:
            plan = search(strict=config.strict_int8)
            mixed = search(strict=False) if config.strict_int8 and report_strict_cost else None
        ranked_ops = [] if config.strict_int8 else ranked["non_int8"]
        assignment = (
            expand(plan.assignment) if config.strict_int8 else {**ranked["assignment"], **expand(plan.assignment)}
        )
        final_cosine = plan.final_cosine
    if (
        every_op is None
        and budget_cosine is not None
        and not config.strict_int8
        and config.float_islands
        and ranked.get("groups")
    ):
        fallback = _float_ranked_points(program, ranked, budget_score, assignment, aim)
        if fallback is not None:
            assignment, ranked_ops = fallback
            final_cosine = evaluate(assignment)
    # then every op at the upgrade precision (after the ranked float islands, which leave the
    # rest of the model on LiteRT's int8 kernels)
    if every_op is None and not config.strict_int8 and score(assignment) < aim:
        every_op = every_op_rung(assignment)
        if every_op["kept"]:
            assignment = every_op.pop("assignment")
            ranked_ops = ranked_ops + [every_op.pop("entry")]
            final_cosine = evaluate(assignment)
    # then float32 weights for the weight tensors whose int8 values cost most, where int8 weights
    # alone keep the model below its aim (android: float islands allowed)
    float_weights = None
    if not config.strict_int8 and config.float_islands and score(assignment) < aim:
        float_weights = _float_weights_rung(program, config, base, eval_samples, scopes, score, assignment, aim)
        if float_weights["kept"]:
            assignment = float_weights.pop("assignment")
            ranked_ops = ranked_ops + float_weights.pop("entries")
            final_cosine = evaluate(assignment)
    final_key = _key(assignment, chosen["ranges"])
    final = built.bytes_of(final_key, f"the recipe {final_key or 'all int8'!r}")
    recipe.update(
        {
            "quantizer": "ai-edge-quantizer",
            "quantizer_recipe": quantizer_recipe(config, {**fixed, **assignment}, scopes),
            "calibration_samples": len(calibration),
            "search": {
                "metric": "the lower of the centered cosine and the worst output's mean per-sample cosine, vs the float IR on calibration samples"
                + (
                    ""
                    if config.target_top1 is None
                    else f", times the share of top-1 agreement {config.target_top1} reached where the classifier outputs' falls short"
                ),
                "samples": len(eval_samples),
                "screening_samples": screening_samples if any(_SCREENED in key for key in measured) else None,
                "target_cosine": config.target_cosine,
                "all_int8_cosine": _round(range_scores[chosen["ranges"]]),
                "final_cosine": _round(final_cosine),
                "evaluations": len(measured),
                "strict_int8": config.strict_int8,
                "inputs": "calibration samples (the search's own)",
                "candidates": _candidates(measured, refused),
            },
            "calibrated_ranges": {
                "method": chosen["ranges"],
                "all_int8_by_method": {m: _round(v) for m, v in range_scores.items()},
                "how": "per-tensor min/max over the calibration samples; where all-int8 missed the target, "
                "also MSE-optimal and 0.01%/99.99% percentile ranges from each activation's histogram "
                "(model outputs keep min/max), the best all-int8 score chosen",
            },
            "sensitivity": None if config.strict_int8 else ranked["report"],
            "every_op": every_op,  # "assignment" and "entry" were taken out where it was kept
            "float_weights": float_weights,
            "decisions": [d.to_json() for d in plan.decisions],
            "non_int8_ops": fixed_ops
            + ranked_ops
            + [
                {"group": d.group, "kind": d.kind, "precision": d.precision, "ops": list(d.ops), "why": d.reason}
                for d in plan.non_int8
            ],
        }
    )
    if mixed is not None:
        mixed_assignment = {**ranked["assignment"], **expand(mixed.assignment)}
        mixed_ops = [{"group": o["group"], "kind": o["kind"], "precision": o["precision"]} for o in ranked["non_int8"]]
        mixed_ops += [{"group": d.group, "kind": d.kind, "precision": d.precision} for d in mixed.non_int8]
        recipe["strict_int8_cost"] = _strict_cost(
            measure(expand(plan.assignment)), measure(mixed_assignment), mixed_ops, len(eval_samples)
        )
        recipe["search"]["evaluations"] = len(measured)
        recipe["search"]["candidates"] = _candidates(measured, refused)
    return final, recipe


def _search_samples(program, calibration: list) -> list:
    """The calibration samples a search measures its candidates on: at most SEARCH_SAMPLES, or
    LARGE_MODEL_SEARCH_SAMPLES for a model of LARGE_MODEL_PARAMETERS or more."""
    large = program.parameter_count >= LARGE_MODEL_PARAMETERS
    return calibration[: LARGE_MODEL_SEARCH_SAMPLES if large else SEARCH_SAMPLES]


def _quantizer_samples(samples, input_infos, channels_last: bool) -> list[dict]:
    out = []
    for sample in samples:
        arrays = tflite_layout_inputs(sample, channels_last)
        out.append({info.name: np.asarray(x).astype(info.dtype) for info, x in zip(input_infos, arrays)})
    return out


def _score_candidate(tflite: bytes, eval_inputs, reference, outputs_of=None) -> "AccuracySummary":
    """A quantized candidate run on `eval_inputs` (the .tflite's layout) against `reference()`,
    in LiteRT or by `outputs_of` (the target's runtime: TFLite-Micro for mcu); the worst score
    when the runtime refuses to run it (an int8 kernel's own check, a DIV whose divisor rounds
    to its zero point) or its outputs are inf/NaN (a float DIV by 0): a recipe that can't ship."""
    from tpuedge.edge.litert.litert_runtime import ModelRunError, run_samples
    from tpuedge.edge.mcu.tflm_runtime import TflmError
    from tpuedge.quantize.metrics import AccuracySummary, compare_outputs

    try:
        outputs = (outputs_of or run_samples)(tflite, eval_inputs)
    except (ModelRunError, TflmError):
        return AccuracySummary.failed_to_run(len(eval_inputs))
    if not all(np.isfinite(o).all() for sample in outputs for o in sample):
        return AccuracySummary.failed_to_run(len(eval_inputs))
    return compare_outputs(reference(), outputs)


def _equalized_candidate(
    program, config, calibration, eval_inputs, reference, best: float, target, outputs_of=None
) -> dict | None:
    """{"program": the program after cross-layer equalization, "report": what was measured, with
    "kept": whether its all-int8 (min/max ranges) beats `best`, this program's best all-int8, by
    _MIN_EQUALIZED_GAIN}; None when no pair can be equalized."""
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.shared_ir.passes.cross_layer_equalization import CrossLayerEqualization
    from tpuedge.shared_ir.program import Program

    exported, result = CrossLayerEqualization()(program.exported_program)
    if not result.changed:
        return None
    equalized = Program(exported, name=program.name)
    base = float_tflite(equalized, channels_last=config.channels_last, target=target)
    quantize = run_quantizer(base)
    entries = quantizer_recipe(config)
    quantize.calibrate(entries, _quantizer_samples(calibration, LiteRTRunner(base).inputs, config.channels_last))
    score = search_score(_score_candidate(quantize(entries), eval_inputs, reference, outputs_of), config.target_top1)
    return {
        "program": equalized,
        "report": {
            "pairs": result.changed,
            "all_int8_cosine_before": _round(best),
            "all_int8_cosine_equalized": _round(score),
            "kept": score >= best + _MIN_EQUALIZED_GAIN,
        },
    }


def _upgrade_ranked_points(
    program, base: bytes, calibration, eval_samples, scopes, evaluate, all_int8: float, config
) -> dict:
    """Rank every int8 point of the IR by its own cost (quantize/sensitivity.py), then give the
    costliest points' ops the config's upgrade (`upgrade_precision`: float islands on android,
    int16 activations on mcu), a growing prefix at a time, by measured cosine.
    `scopes` gains the ranked groups. Returns the assignment chosen and the report for the recipe."""
    from tpuedge.edge.point_ranking import ranked_points
    from tpuedge.edge.litert.sensitive_groups import ranked_groups
    from tpuedge.quantize.sensitivity import RANKING_SAMPLES, TooManyPoints
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    measure_on = eval_samples[:RANKING_SAMPLES]
    with stage_progress(f"{program.name}: int8 sensitivity of every IR point ({len(measure_on)} samples)", total=1):
        try:
            with timed("int8 search: IR sensitivity ranking"):
                ranking = ranked_points(program, calibration, measure_on)
        except (UserError, InternalError, TooManyPoints) as exc:  # the JAX lowering can't run it, or too many
            # points to rank: the op-group search (recurrent state, norms, ...) still runs
            return {
                "assignment": {},
                "report": {"unavailable": " ".join(str(exc).split())[:400]},
                "non_int8": [],
                "groups": [],
            }
    groups, group_scopes = ranked_groups(base, ranking)
    scopes.update(group_scopes)
    with stage_progress(
        f"{program.name}: {config.upgrade_precision} for the top-ranked of {len(groups)} point(s)", total=len(groups)
    ):
        assignment, cosine, tried = upgrade_ranked(
            groups, evaluate, all_int8, target_cosine=config.target_cosine, precision=config.upgrade_precision
        )
    by_key = {g.key: g for g in groups}
    points = sum(by_key[key].kind == "ranked" for key in assignment)
    report = {
        "method": "each IR quantization point alone in fake int8 (JAX lowering, calibrated min/max ranges), "
        "1 - mean per-sample cosine of the outputs vs float",
        "samples": len(measure_on),
        "inputs": "calibration samples (the search's own)",
        "top": [s.to_json() for s in ranking[:10]],
        "groups": [g.key for g in groups],
        "precision": config.upgrade_precision,
        "prefixes_tried": [{"groups": k, "search_score": _round(c)} for k, c in tried],
        "chosen": points,
    }
    non_int8 = [
        {
            "group": key,
            "kind": by_key[key].kind,
            "precision": precision,
            "ops": list(by_key[key].ops),
            "why": (
                f"ranked among the {points} costliest IR points in int8"
                if by_key[key].kind == "ranked"
                else "writes a model output from a ranked point's value (float keeps the output float)"
            )
            + f"; model cosine {_round(all_int8)} -> {_round(cosine)}",
        }
        for key, precision in assignment.items()
    ]
    return {"assignment": assignment, "report": report, "non_int8": non_int8, "groups": groups}


def _every_op(
    base: bytes, assignment: dict, score, aim: float, refused: dict, scopes, ranges: str, precision: str
) -> dict:
    """The search's last resort where `assignment` (the ranked points, the op groups, float
    islands) scores below its aim by `score`: every op type at `precision` on top of it, weights
    int8 (the config's upgrade: 16-bit activations on mcu, float compute on android, where LiteRT
    runs int16 on its reference kernels: ShuffleNetV2-x0.5's int8 candidate took 25.3 ms per
    invoke with every op int16, its float model 1.3 ms). Random-init DeiT-tiny on its held-out
    images: all-int8 0.84, every op int16 0.992. An op type the target refuses (named in
    `refused`, the target's check: TFLite-Micro has no int16 GATHER_ND) is left int8 and the rest
    measured again, at most _EVERY_OP_TRIES times. Where it reaches `aim`, the table lookups and
    then the compute-heavy op types go back to int8 one at a time, each kept int8 while the aim holds. Returns the report:
    "kept" (it scores _MIN_EVERY_OP_GAIN above `start`), and where kept the new "assignment" and
    its non_int8_ops "entry"."""
    import re

    from tpuedge.edge.litert.sensitive_groups import every_op_group, every_op_types

    types = every_op_types(base)
    names = [name for name, _, _ in types]
    start = score(assignment)
    tried: list[dict] = []

    def measure_without(excluded: frozenset[str], **note) -> dict:
        """Every op type but `excluded` at `precision` on top of `assignment`, measured; its `tried` row."""
        group, members = every_op_group(types, excluded)
        scopes[group.key] = members
        trial = {**assignment, group.key: precision}
        cosine = score(trial)
        why = refused.get(_key(trial, ranges))
        tried.append(
            {"left_int8": sorted(excluded), "score": _round(cosine), **note, **({"refused": why} if why else {})}
        )
        return tried[-1]

    excluded: frozenset[str] = frozenset()
    for _ in range(_EVERY_OP_TRIES):
        if excluded >= set(names):
            break
        why = measure_without(excluded).get("refused")
        named = {name for name in names if why and re.search(rf"\b{name}\b", why.upper())} - excluded
        if not named:
            break
        excluded = excluded | named
    best = max((t for t in tried if "refused" not in t), key=lambda t: t["score"], default=None)
    report = {"precision": precision, "start_score": _round(start), "tried": tried, "kept": False}
    if best is None or best["score"] < start + _MIN_EVERY_OP_GAIN:
        return report
    # with score to spare, the tables and the heavy op types go back to int8 one at a time while
    # the aim holds: int8 tables are a quarter of the bytes, int8 kernels the fast ones (int16 in
    # LiteRT, ShuffleNetV2-x0.5: 1.6 ms per invoke -> 10.3 ms); tables first, each kind in graph order
    heavy = sorted(
        (name for name in names if name in _TABLE_OPS + _COMPUTE_HEAVY_OPS and name not in best["left_int8"]),
        key=lambda name: name not in _TABLE_OPS,
    )
    for name in heavy if best["score"] >= aim else []:
        row = measure_without(frozenset(best["left_int8"]) | {name}, back_to_int8=name)
        if "refused" not in row and row["score"] >= aim:
            best = row
    group, members = every_op_group(types, frozenset(best["left_int8"]))
    scopes[group.key] = members
    every = "every activation at 16 bits" if precision == "int16" else "every op in float (weights int8)"
    entry = {
        "group": group.key,
        "kind": group.kind,
        "precision": precision,
        "ops": list(group.ops),
        "why": f"the ranked points, the op groups and float islands left the model at {_round(start)}, below the "
        f"search's aim; {every}: {best['score']}",
    }
    return {
        **report,
        "kept": True,
        "cosine": best["score"],
        "assignment": {**assignment, group.key: precision},
        "entry": entry,
    }


def _float_weights_rung(
    program, config, base: bytes, eval_samples, scopes, score, assignment: dict, aim: float
) -> dict:
    """The search's last rung (android): the IR's weight tensors ranked by their int8 cost alone
    (quantize/weight_sensitivity.py), then float32 weights for the ops reading the costliest, the
    fewest that reach `aim` on top of `assignment`, within FLOAT_WEIGHTS_BYTES_SHARE of the
    parameter count in extra bytes. Returns the report, with "kept" and, where kept, the new
    "assignment" and its non_int8_ops "entries"."""
    from tpuedge.edge.litert.litert_lowering import litert_ir_passes
    from tpuedge.edge.litert.sensitive_groups import weight_groups
    from tpuedge.quantize.recipes import float_ranked
    from tpuedge.quantize.weight_sensitivity import WEIGHT_RANKING_SAMPLES, rank_weights, ranking_from_json
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_json, encode_json
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.program import Program
    from tpuedge.shared_ir.stage_times import timed

    samples = eval_samples[:WEIGHT_RANKING_SAMPLES]
    with (
        stage_progress(f"{program.name}: int8 cost of each weight tensor ({len(samples)} samples)", total=1),
        timed("int8 search: IR weight ranking"),
    ):
        # the program the converter saw (BatchNorm folded): its weights are the ones quantized
        lowered = Program(litert_ir_passes(program.exported_program), name=program.name)
        parts = {"ir": program.fingerprint, "samples": data_digest(samples), "per_channel": config.per_channel}
        entries = cached_stage(
            "weight_ranking",
            parts,
            lambda: [w.to_json() for w in rank_weights(lowered, samples, per_channel=config.per_channel)],
            encode=encode_json,
            decode=decode_json,
        )
        ranking = ranking_from_json(lowered, entries)
    # float32 costs 3 bytes an element over int8: the extra stays within the size goal's slack
    cap = int((FLOAT_WEIGHTS_BYTES_SHARE * program.parameter_count + FLOAT_WEIGHTS_BYTES_FLOOR) / 3)
    groups, group_scopes = weight_groups(base, ranking, cap)
    scopes.update(group_scopes)
    start = score(assignment)
    report = {
        "method": "each IR weight tensor alone rounded to int8 (symmetric, "
        f"{'per output channel' if config.per_channel else 'per tensor'}), activations float, "
        "1 - the worst output's mean per-sample cosine vs float (torch, the IR)",
        "samples": len(samples),
        "inputs": "calibration samples (the search's own)",
        "top": [w.to_json() for w in ranking[:10]],
        "weights_ranked": len(ranking),
        "float32_elements_cap": cap,
        "start_score": _round(start),
        "kept": False,
    }
    if not groups:
        return report
    with stage_progress(
        f"{program.name}: float32 weights for the costliest of {len(groups)} weight tensor(s)", total=1
    ):
        floated, cosine, tried = float_ranked(groups, score, assignment, start, target_cosine=aim, precision="float32")
    report["prefixes_tried"] = [{"weights": k, "score": _round(c)} for k, c in tried]
    if floated == assignment:
        return report
    why = (
        f"int8 weights left the model at {_round(start)} (aim {_round(aim)}); "
        f"float32 weights for the costliest: {_round(cosine)}"
    )
    entries = [
        {"group": g.key, "kind": g.kind, "precision": "float32", "ops": list(g.ops), "why": why}
        for g in groups
        if floated.get(g.key) == "float32"
    ]
    return {**report, "kept": True, "cosine": _round(cosine), "assignment": floated, "entries": entries}


def dynamic_int8_weights(
    program, config, calibration, base: bytes, quantized: bytes, recipe: dict, quantize, budget_cosine: float
) -> bytes:
    """dynamic-int8's one remedy (android): where its model scores below the aim on the
    calibration samples (the build holds its budget's samples out of them), the float32-weights
    rung (`_float_weights_rung`): the ops reading the costliest weight tensors left unquantized,
    weights and activations. Returns the model (`quantized` where nothing better was measured);
    `recipe` gains "float_weights", and where kept its "non_int8_ops" and "quantizer_recipe"."""
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_blob_and_json, encode_blob_and_json
    from tpuedge.shared_ir.stage_times import timed

    eval_samples = _search_samples(program, calibration)
    reference = functools.cache(lambda: [program.run(*s) for s in eval_samples])
    eval_inputs = [tflite_layout_inputs(s, config.channels_last) for s in eval_samples]
    aim = min(budget_cosine + _HELD_OUT_MARGIN, 1.0)
    scopes: dict = {}
    scores: dict[str, float] = {}  # recipe key -> the budget's metric
    built = _MeasuredCandidates()

    def score(assignment: dict[str, str]) -> float:  # the budget's metric, on the search's samples
        key = _key(assignment)
        if key not in scores:
            entries = quantizer_recipe(config, assignment, scopes)

            def build_and_score() -> tuple[bytes, dict]:
                data = quantize(entries) if assignment else quantized
                summary = _score_candidate(data, eval_inputs, reference)
                cosine = summary.centered_cosine if summary.sample_cosine is None else summary.sample_cosine
                return data, {"score": _top1_scaled(cosine, summary.top1_agreement, config.target_top1)}

            parts = {
                "ir": program.fingerprint,
                "float": hashlib.sha256(base).hexdigest(),
                "calibration": data_digest(eval_samples),
                "channels_last": config.channels_last,
                "recipe": entries,
                **({"target_top1": config.target_top1} if config.target_top1 is not None else {}),
            }
            with timed("dynamic-int8: float32-weights candidates"):
                data, meta = cached_stage(
                    "dynamic_candidate",
                    parts,
                    build_and_score,
                    encode=encode_blob_and_json,
                    decode=decode_blob_and_json,
                )
            scores[key] = float(meta["score"])
            built.add(key, data, lambda: quantize(entries) if assignment else quantized)
        return scores[key]

    if score({}) >= aim:
        recipe["float_weights"] = None
        return quantized
    report = _float_weights_rung(program, config, base, eval_samples, scopes, score, {}, aim)
    recipe["float_weights"] = report
    if not report["kept"]:
        return quantized
    assignment = report.pop("assignment")
    recipe["non_int8_ops"] = report.pop("entries")
    recipe["quantizer_recipe"] = quantizer_recipe(config, assignment, scopes)
    # the prefix search ends on the one it keeps unless a later one measured worse
    key = _key(assignment)
    return built.bytes_of(key, f"the dynamic-int8 recipe {key!r}")


def _float_ranked_points(program, ranked: dict, budget_score, assignment: dict, aim: float):
    """The search's last resort (float islands allowed) where `assignment`, all that int16 and the
    op groups found, scores below `aim` by the budget's metric: the top-ranked points as float
    islands on top of it, the fewest that reach `aim`. Returns (assignment, the ranked groups'
    non-int8 entries), or None when it changes nothing; the report gains the prefixes tried."""
    from tpuedge.quantize.recipes import float_ranked
    from tpuedge.shared_ir.progress import stage_progress

    start = budget_score(assignment)
    if start >= aim:
        return None
    groups = ranked["groups"]
    with stage_progress(f"{program.name}: float islands for the top-ranked of {len(groups)} point(s)", total=1):
        floated, floated_cosine, tried = float_ranked(groups, budget_score, assignment, start, target_cosine=aim)
    ranked["report"]["float_prefixes_tried"] = [{"float_groups": k, "sample_cosine": _round(c)} for k, c in tried]
    if floated == assignment:
        return None
    by_key = {g.key: g for g in groups}
    why = (
        f"int16 and the op groups left the model at mean per-sample cosine {_round(start)} (aim {_round(aim)}); "
        f"float islands for the costliest points: {_round(floated_cosine)}"
    )
    entries = [e for e in ranked["non_int8"] if floated.get(e["group"]) == e["precision"]]
    entries += [
        {"group": key, "kind": by_key[key].kind, "precision": precision, "ops": list(by_key[key].ops), "why": why}
        for key, precision in floated.items()
        if key in by_key and precision != "int8" and assignment.get(key) != precision
    ]
    return floated, entries


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


def _strict_cost(strict, mixed, mixed_ops: list[dict], samples: int) -> dict:
    """Strict int8 next to the default mixed recipe on the same samples (cost = mixed - strict)."""

    def diff(name: str) -> float | None:
        a, b = getattr(mixed, name), getattr(strict, name)
        return None if a is None or b is None else _round(a - b)

    return {
        "samples": samples,
        "inputs": "calibration samples (the search's), LiteRT vs the float IR",
        "strict_int8": strict.to_json(),
        "mixed": mixed.to_json(),
        "mixed_non_int8_ops": mixed_ops,
        "cost": {
            "centered_cosine": diff("centered_cosine"),
            "cosine": diff("cosine"),
            "top1_agreement": diff("top1_agreement"),
            "max_abs_error_ratio": _round(strict.max_abs_error / mixed.max_abs_error) if mixed.max_abs_error else None,
        },
    }


def search_score(summary, target_top1: float | None = None) -> float:
    """What the int8 search maximizes: the lower of the centered cosine and the worst output's
    mean per-sample cosine (the budget's metric), scaled by the share of `target_top1` reached
    where the classifier outputs' top-1 agreement falls short of it (QuantConfig.target_top1)."""
    sample = summary.sample_cosine
    cosine = summary.centered_cosine if sample is None else min(summary.centered_cosine, sample)
    return _top1_scaled(cosine, summary.top1_agreement, target_top1)


def _top1_scaled(cosine: float, top1: float | None, target_top1: float | None) -> float:
    """`cosine`, or where the top-1 agreement misses its target, `cosine` times the share reached:
    below any cosine aim, and higher the closer the argmax comes."""
    if target_top1 is None or top1 is None or top1 >= target_top1 or cosine <= 0:
        return cosine
    return cosine * top1 / target_top1


def _candidates(measured: dict, refused: dict[str, str]) -> list[dict]:
    """Every recipe the search measured, in order, with its numbers (the table a build below budget
    prints), and why the target refused it where it did."""
    return [
        {
            "recipe": key if key and not key.startswith(" [") else f"all int8{key}",
            "sample_cosine": _round(m.sample_cosine),
            "centered_cosine": _round(m.centered_cosine),
            "cosine": _round(m.cosine),
            "top1_agreement": _round(m.top1_agreement),
            **({"refused": refused[key]} if key in refused else {}),
        }
        for key, m in measured.items()
    ]


def _key(assignment: dict[str, str], ranges: str = "min-max") -> str:
    key = ",".join(f"{k}={v}" for k, v in sorted(assignment.items()) if v != "int8")
    return key if ranges == "min-max" else f"{key or 'all int8'} [{ranges} ranges]"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def fused_lstm_plan(program, config, calibration, base: bytes, budget_cosine: float | None):
    """edge/litert/fused_lstm_weights.py's plan for the fused LSTMs' weights of `base` in a quantized build
    (None: there are none), measured on the search's samples. Their int8 may cost half of what
    the build's aim leaves (its budget plus the held-out margin, else the search's target):
    the other half is the rest of the model's."""
    from tpuedge.edge.litert.fused_lstm_weights import FusedLSTMWeights, has_fused_lstm, plan_fused_lstm_weights
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_json, encode_json
    from tpuedge.shared_ir.stage_times import timed

    if not has_fused_lstm(base):
        return None
    aim = min(budget_cosine + _HELD_OUT_MARGIN, 1.0) if budget_cosine is not None else config.target_cosine
    eval_samples = _search_samples(program, calibration) if calibration else []
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
