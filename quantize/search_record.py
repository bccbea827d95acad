"""The int8 search's record in the recipe: what it measured, what it chose and why
(quantize/precision_search.py fills it once the rungs are done)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpuedge.quantize.search_score import SCREENED, candidates_table, recipe_key, rounded, strict_cost

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.search_candidates import CandidateMeasurer

__all__ = ["search_record"]


def search_record(
    config,
    calibration,
    cands: "CandidateMeasurer",
    recipe: dict,
    *,
    fixed_ops: list[dict],
    ranked: dict,
    ranked_ops: list[dict],
    plan,
    mixed,
    expand,
    assignment: dict[str, str],
    final_cosine: float,
    range_scores: dict[str, float],
    screening_samples: int,
    every_op: dict | None,
    float_weights: dict | None,
) -> tuple[bytes, dict]:
    """(the chosen recipe's bytes, `recipe` completed with the search's record): the quantizer
    recipe of `assignment` on top of the fixed groups, every candidate measured, the ranges, the
    rungs' reports and each non-int8 op with why; with the strict-int8 cost where `mixed`, the
    default search run beside a strict one, is given."""
    backend, measured, refused = cands.backend, cands.measured, cands.refused
    final_key = recipe_key(assignment, cands.ranges)
    final = cands.built.bytes_of(final_key, f"the recipe {final_key or 'all int8'!r}")
    recipe.update(
        {
            "quantizer": backend.quantizer,
            "quantizer_recipe": backend.recipe({**cands.fixed, **assignment}, cands.scopes),
            "calibration_samples": len(calibration),
            "search": {
                "metric": "the lower of the centered cosine and the worst output's mean per-sample cosine, vs the float IR on calibration samples"
                + (
                    ""
                    if config.target_top1 is None
                    else f", times the share of top-1 agreement {config.target_top1} reached where the classifier outputs' falls short"
                ),
                "samples": len(cands.eval_inputs),
                "screening_samples": screening_samples if any(SCREENED in key for key in measured) else None,
                "target_cosine": config.target_cosine,
                "all_int8_cosine": rounded(range_scores[cands.ranges]),
                "final_cosine": rounded(final_cosine),
                "evaluations": len(measured),
                "strict_int8": config.strict_int8,
                "inputs": "calibration samples (the search's own)",
                "candidates": candidates_table(measured, refused),
            },
            "calibrated_ranges": {
                "method": cands.ranges,
                "all_int8_by_method": {m: rounded(v) for m, v in range_scores.items()},
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
        recipe["strict_int8_cost"] = strict_cost(
            cands.measure(expand(plan.assignment)), cands.measure(mixed_assignment), mixed_ops, len(cands.eval_inputs)
        )
        recipe["search"]["evaluations"] = len(measured)
        recipe["search"]["candidates"] = candidates_table(measured, refused)
    return final, recipe
