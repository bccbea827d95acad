"""Static int8's measured remedies and per-op precision search, over one backend's candidates.

The backend (quantize/search_backend.py; edge/litert/litert_candidates.py for the LiteRT
targets) has calibrated its float model; every candidate recipe is quantized and run against
the float IR on calibration samples, and the search never keeps a recipe scoring below one it
measured (quantize/recipes.py chooses).

Where all-int8 misses the target, remedies are measured before the search: estimated
activation ranges (MSE, percentile) and cross-layer equalization of conv/linear pairs across a
relu (shared_ir/passes/cross_layer_equalization.py). Then the IR's costliest points
(quantize/search_rungs.py), the op groups, and the last rungs (android): the ranked points as
float islands, every op in float with int8 weights, then float32 weights for the weight tensors
whose int8 values cost most (quantize/float_weights.py). Each is kept only if it scores better;
an equalized program is then converted in the user's program's place (the manifest says so, and
per-layer verify compares against it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpuedge.quantize import search_rungs
from tpuedge.quantize.float_weights import float_weights_rung
from tpuedge.quantize.recipes import (
    FLOAT_FROM_THE_START,
    SENSITIVE_KINDS,
    PrecisionPlan,
    choose_precisions,
    merge_by_kind,
)
from tpuedge.quantize.search_backend import Equalized
from tpuedge.quantize.search_candidates import CandidateMeasurer
from tpuedge.quantize.search_record import search_record
from tpuedge.quantize.search_score import rounded, search_score
from tpuedge.quantize.search_settings import (
    ESTIMATED_RANGES,
    EVERY_OP_FIRST_GROUPS,
    HELD_OUT_MARGIN,
    MIN_EQUALIZED_GAIN,
    MIN_RANGE_GAIN,
    MIN_SCREENING_SAMPLES,
    SCREENING_SHARE,
    TABLE_OPS,
    COMPUTE_HEAVY_OPS,
    EVERY_OP_TRIES,
    search_samples,
)

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.search_backend import CandidateBackend
    from tpuedge.shared_ir.program import Program

__all__ = ["search_precisions"]


def search_precisions(
    program: "Program",
    config,
    calibration,
    backend: "CandidateBackend",
    recipe: dict,
    *,
    report_strict_cost: bool,
    budget_cosine: float | None,
    equalize: bool,
) -> "tuple[bytes, dict] | Equalized":
    """(the int8 model of `program`, its recipe) from `backend`, calibrated on `calibration`;
    `recipe` is the conversion's record so far, completed in place. Or `Equalized` where the
    program after cross-layer equalization quantizes better. Options as `program_to_tflite`
    (edge/litert/convert.py) documents them."""
    from tpuedge.shared_ir.progress import stage_progress

    groups, scopes = backend.sensitive_groups()
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
    eval_samples = search_samples(program, calibration)
    cands = CandidateMeasurer(program, config, calibration, backend, fixed, scopes, eval_samples)
    evaluate = cands.evaluate
    screening_samples = max(MIN_SCREENING_SAMPLES, len(cands.eval_inputs) // SCREENING_SHARE)

    # where all-int8 with min/max ranges misses the target, the ranges estimated from histograms
    # are measured too (quantize/range_estimation.py), and the best all-int8 sets the search's ranges
    with stage_progress(f"{program.name}: all-int8 candidate", total=1) as cands.step:
        range_scores = {"min-max": evaluate({})}
    if range_scores["min-max"] < config.target_cosine:
        with stage_progress(
            f"{program.name}: activation ranges from histograms", total=1 + len(ESTIMATED_RANGES)
        ) as cands.step:
            cands.step("histograms of the calibration activations")
            backend.estimate_ranges(ESTIMATED_RANGES)
            for method in ESTIMATED_RANGES:
                range_scores[method] = evaluate({}, method)
                if range_scores[method] > range_scores[cands.ranges] + MIN_RANGE_GAIN:
                    cands.ranges = method

    # where all-int8 misses the target, the same function with its channels equalized across
    # relus may quantize better: measured, and converted instead when it does
    best_all_int8 = max(range_scores.values())
    if equalize and best_all_int8 < config.target_cosine:
        with stage_progress(f"{program.name}: all-int8 after cross-layer equalization", total=1) as cands.step:
            cands.step("equalize, convert, calibrate, score")
            equalized = _equalized_candidate(program, config, calibration, backend, cands, best_all_int8)
        if equalized is not None and equalized["report"]["kept"]:
            return Equalized(equalized["program"], equalized["report"])
        if equalized is not None:
            recipe["cross_layer_equalization"] = equalized["report"]

    # where all-int8 misses the target, the IR's costliest points are upgraded first (float
    # islands on android, int16 on mcu; not under --strict-int8, whose reported cost compares it
    # with this default recipe)
    ranked: dict = {"assignment": {}, "report": None, "non_int8": []}
    if config.rank_points and (not config.strict_int8 or report_strict_cost):
        all_int8 = range_scores[cands.ranges]
        if all_int8 < config.target_cosine:
            ranked = search_rungs.upgrade_ranked_points(
                program, backend, calibration, eval_samples, scopes, evaluate, all_int8, config
            )

    # the groups searched: each op group, or one per kind (config.group_by_kind)
    search_groups, expand = merge_by_kind(groups) if config.group_by_kind else (groups, dict)

    # the last resorts aim this far above the budget on the search's own samples, or at the target
    if budget_cosine is None:
        aim, score, metric = config.target_cosine, evaluate, "the search's score"
    else:
        aim, score, metric = (
            min(budget_cosine + HELD_OUT_MARGIN, 1.0),
            cands.budget_score,
            "the budget's metric (mean per-sample cosine)",
        )

    # Where float islands are allowed and the op groups are many (a transformer's norms, GELUs and
    # attention products, 3-5 a layer), the whole-model float rung is measured first: a handful of
    # candidates against one per group and more. Where it meets the aim the group search is not run
    # (MiniLM-L6 ended on this rung after ~45 group candidates, ~15 s of a 38 s build).
    def every_op_rung(start: dict[str, str]) -> dict:
        """`every_op` on top of `start`, its progress shown; the recipe's report."""
        with stage_progress(
            f"{program.name}: every op at {config.upgrade_precision}",
            total=EVERY_OP_TRIES + len(TABLE_OPS) + len(COMPUTE_HEAVY_OPS),
        ) as cands.step:
            report = search_rungs.every_op(
                backend, start, score, aim, cands.refused, scopes, cands.ranges, config.upgrade_precision
            )
        return {"metric": f"{metric}, on calibration samples", "aim": rounded(aim), **report}

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

        screen = scored(screening_samples) if screening_samples < len(cands.eval_inputs) else None
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
        ) as cands.step:
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
        fallback = search_rungs.float_ranked_points(program, ranked, cands.budget_score, assignment, aim)
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
        float_weights = float_weights_rung(program, config, backend, eval_samples, scopes, score, assignment, aim)
        if float_weights["kept"]:
            assignment = float_weights.pop("assignment")
            ranked_ops = ranked_ops + float_weights.pop("entries")
            final_cosine = evaluate(assignment)
    return search_record(
        config,
        calibration,
        cands,
        recipe,
        fixed_ops=fixed_ops,
        ranked=ranked,
        ranked_ops=ranked_ops,
        plan=plan,
        mixed=mixed,
        expand=expand,
        assignment=assignment,
        final_cosine=final_cosine,
        range_scores=range_scores,
        screening_samples=screening_samples,
        every_op=every_op,
        float_weights=float_weights,
    )


def _equalized_candidate(program, config, calibration, backend, cands, best: float) -> dict | None:
    """{"program": the program after cross-layer equalization, "report": what was measured, with
    "kept": whether its all-int8 (min/max ranges) beats `best`, this program's best all-int8, by
    MIN_EQUALIZED_GAIN}; None when no pair can be equalized."""
    from tpuedge.quantize import search_candidates
    from tpuedge.shared_ir.passes.cross_layer_equalization import CrossLayerEqualization
    from tpuedge.shared_ir.program import Program

    exported, result = CrossLayerEqualization()(program.exported_program)
    if not result.changed:
        return None
    equalized = Program(exported, name=program.name)
    data = backend.all_int8_of(equalized, calibration)
    summary = search_candidates.score_candidate(data, cands.eval_inputs, cands.reference, backend.outputs)
    score = search_score(summary, config.target_top1)
    return {
        "program": equalized,
        "report": {
            "pairs": result.changed,
            "all_int8_cosine_before": rounded(best),
            "all_int8_cosine_equalized": rounded(score),
            "kept": score >= best + MIN_EQUALIZED_GAIN,
        },
    }
