"""How a build's accuracy budget (quantize/budget.py) is told: the exit-1 error of a build below
it, with the recipes the search tried, and the console line from a manifest's entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpuedge.shared_ir.errors import BudgetError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.budget import BudgetResult

__all__ = ["budget_error", "describe_budget"]


def _row(label: str, sample_cosine, centered, top1, refused: str | None = None) -> str:
    if refused:  # the target's own check refused the candidate (edge/tflm_candidates.tflm_candidate_problem)
        return f"  {label[:64]:<64} not run: {refused[:200]}"
    if sample_cosine == -1.0 and centered == -1.0:  # AccuracySummary.failed_to_run
        return f"  {label[:64]:<64} {'LiteRT refused to run it, or inf/NaN out':>29}"
    fmt = lambda x: "n/a" if x is None else f"{x:.5f}"  # noqa: E731
    t1 = "n/a" if top1 is None else f"{100 * top1:.1f}%"
    return f"  {label[:64]:<64} {fmt(sample_cosine):>10} {fmt(centered):>10} {t1:>7}"


def budget_error(name: str, target: str, result: "BudgetResult", recipe: dict, summary) -> BudgetError:
    """The exit-1 error of a build below its budget: what was missed, the recipes tried, the ways out.

    summary: the built model's AccuracySummary on the budget's samples (the last row)."""
    search = recipe.get("search") or {}
    candidates = search.get("candidates", [])
    lines = [
        f"{name}: the {target} build misses its accuracy budget ({result.budget.describe()}), so nothing was written "
        "and the output folder is as it was.",
        f"Measured on {result.samples} {result.inputs}:",
        *(f"  - {f}" for f in result.failures),
        f"Recipes tried ({max(1, len(candidates))}), numbers vs the float IR:",
        f"  {'recipe (groups not int8)':<64} {'sample cos':>10} {'centered':>10} {'top-1':>7}",
    ]
    if candidates:
        lines.append(f" on {search.get('samples')} {search.get('inputs', 'calibration samples')}:")
        lines += [
            _row(c["recipe"], c.get("sample_cosine"), c["centered_cosine"], c.get("top1_agreement"), c.get("refused"))
            for c in candidates
        ]
    lines.append(f" the recipe built ({recipe.get('scheme')}), on {result.samples} {result.inputs}:")
    lines.append(
        _row(f"scheme {recipe.get('scheme')}", summary.sample_cosine, summary.centered_cosine, summary.top1_agreement)
    )
    top = (recipe.get("sensitivity") or {}).get("top") or []
    if top:
        lines.append(
            "Where int8 costs most (each IR point alone in fake int8: 1 - cosine of the outputs, its range, source):"
        )
        lines += [
            f"  {p['node']} ({p['op']}) {p['loss']:.4f}, range [{p['range'][0]:.3g}, {p['range'][1]:.3g}]"
            + (f" at {p['source']}" if p.get("source") else "")
            for p in top[:5]
        ]
    other = (
        "--quantize auto (which also tries dynamic-int8, fp16 and float)"
        if target == "android"
        else "--target android, where sensitive ops may stay float or int16"
    )
    lines.append(
        f"Try: more or more representative --calibration data, {other}, a lower --min-cosine if this error is "
        "acceptable, or --allow-below-budget to write the model anyway (marked below budget in its manifest)."
    )
    return BudgetError("\n".join(lines))


def describe_budget(entry: dict | None) -> str | None:
    """One console line from a manifest's accuracy_budget entry."""
    if not entry:
        return None
    measured = entry["measured"]
    cos = ", ".join("n/a" if c is None else f"{c:.5f}" for c in measured["sample_cosine_per_output"])
    text = f"mean per-sample cosine {cos} (min {entry['min_cosine']})"
    if entry.get("min_top1") is not None and entry.get("top1_outputs") != []:
        top1 = ", ".join("n/a" if t is None else f"{100 * t:.1f}%" for t in measured["top1_agreement_per_output"])
        text += f", top-1 agreement {top1} (min {100 * entry['min_top1']:.1f}% on the class scores)"
    if measured.get("drop_points") is not None:
        bound = entry.get("max_drop_points")
        text += f", accuracy drop {measured['drop_points']:.2f} points " + (
            f"(max {bound})" if bound is not None else "(not bounded: --max-drop POINTS sets it)"
        )
    where = f"on {entry['samples']} {entry['inputs']}"
    if entry["met"]:
        return f"  accuracy budget met: {text} {where}"
    return f"  BELOW ACCURACY BUDGET (written because --allow-below-budget): {'; '.join(entry['failures'])} {where}"
