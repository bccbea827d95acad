"""The accuracy budget of a language model build: token agreement with its float IR.

    budget = LMBudget.from_options(min_top1=0.95, max_perplexity_increase=0.05)
    failures = budget.failures(agreement)    # agreement: token_metrics.TokenAgreement, held-out text

A build below it exits 1 and writes nothing (unless --allow-below-budget). `--quantize auto`
keeps the smallest candidate that meets it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuedge.shared_ir.errors import BudgetError, UserError

__all__ = [
    "LMBudget",
    "DEFAULT_MIN_TOKEN_AGREEMENT",
    "DEFAULT_MAX_PERPLEXITY_INCREASE",
    "lm_budget_error",
    "perplexity_build_option",
]

DEFAULT_MIN_TOKEN_AGREEMENT = 0.90
DEFAULT_MAX_PERPLEXITY_INCREASE = 0.05


def perplexity_build_option():
    """`--max-perplexity-increase`, one definition for every target that builds language models."""
    from tpuedge.shared_ir.targets import BuildOption

    return BuildOption(
        "max_perplexity_increase",
        "accuracy budget of a language model: its perplexity on held-out text at "
        "most this much (relative, 0.05 = 5%) above the float IR's",
        float,
        None,
    )


@dataclass(frozen=True)
class LMBudget:
    min_top1: float = DEFAULT_MIN_TOKEN_AGREEMENT
    max_perplexity_increase: float = DEFAULT_MAX_PERPLEXITY_INCREASE
    allow_below: bool = False

    @classmethod
    def from_options(cls, *, min_top1=None, max_perplexity_increase=None, allow_below_budget=False) -> "LMBudget":
        top1 = DEFAULT_MIN_TOKEN_AGREEMENT if min_top1 is None else float(min_top1)
        increase = (
            DEFAULT_MAX_PERPLEXITY_INCREASE if max_perplexity_increase is None else float(max_perplexity_increase)
        )
        if not 0.0 <= top1 <= 1.0:
            raise UserError(f"--min-top1 {min_top1} is a share of positions, in [0, 1]; give e.g. --min-top1 0.95.")
        if increase < 0.0:
            raise UserError(
                f"--max-perplexity-increase {max_perplexity_increase} is relative and >= 0; give e.g. 0.05 (5%)."
            )
        return cls(top1, increase, bool(allow_below_budget))

    def failures(self, agreement) -> list[str]:
        out = []
        if agreement.top1_agreement < self.min_top1:
            out.append(
                f"teacher-forced top-1 agreement {100 * agreement.top1_agreement:.2f}% < {100 * self.min_top1:.1f}%"
            )
        if agreement.perplexity_increase > self.max_perplexity_increase + 1e-12:
            out.append(
                f"perplexity {agreement.perplexity:.3f} is {100 * agreement.perplexity_increase:.2f}% above the float IR's "
                f"{agreement.reference_perplexity:.3f} (max {100 * self.max_perplexity_increase:.1f}%)"
            )
        return out

    def describe(self) -> str:
        return (
            f"teacher-forced top-1 agreement >= {100 * self.min_top1:.1f}% and perplexity at most "
            f"{100 * self.max_perplexity_increase:.1f}% above the float IR's"
        )

    def to_json(self) -> dict:
        return {"min_top1": self.min_top1, "max_perplexity_increase": self.max_perplexity_increase}


def lm_budget_error(
    name: str, target: str, budget: LMBudget, rows: list[tuple[str, object, list[str]]], source: str
) -> BudgetError:
    """The exit-1 error of an LM build below its budget. rows: (scheme, TokenAgreement, failures)."""
    lines = [
        f"{name}: the {target} build misses its accuracy budget ({budget.describe()}), so nothing was written and "
        "the output folder is as it was.",
        f"Measured on {source}:",
        f"  {'scheme':<18} {'top-1':>8} {'perplexity':>11} {'vs float':>9}",
    ]
    for scheme, agreement, failures in rows:
        lines.append(
            f"  {scheme:<18} {100 * agreement.top1_agreement:>7.2f}% {agreement.perplexity:>11.3f} "
            f"{100 * agreement.perplexity_increase:>+8.2f}%" + ("" if failures else "  (meets the budget)")
        )
    lines.append(
        "Try: a scheme with more bits (--quantize weight-only-int8, or none), a lower --min-top1 or a higher "
        "--max-perplexity-increase if that loss is acceptable, or --allow-below-budget to write the model anyway "
        "(marked below budget in its manifest)."
    )
    return BudgetError("\n".join(lines))
