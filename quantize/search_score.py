"""What the int8 precision search maximizes, and how its record names and rounds what it measured."""

from __future__ import annotations

__all__ = ["search_score", "top1_scaled", "recipe_key", "rounded", "candidates_table", "strict_cost", "SCREENED"]

SCREENED = "screened on"  # in a screening candidate's key, the table of recipes measured


def search_score(summary, target_top1: float | None = None) -> float:
    """What the int8 search maximizes: the lower of the centered cosine and the worst output's
    mean per-sample cosine (the budget's metric), scaled by the share of `target_top1` reached
    where the classifier outputs' top-1 agreement falls short of it (QuantConfig.target_top1)."""
    sample = summary.sample_cosine
    cosine = summary.centered_cosine if sample is None else min(summary.centered_cosine, sample)
    return top1_scaled(cosine, summary.top1_agreement, target_top1)


def top1_scaled(cosine: float, top1: float | None, target_top1: float | None) -> float:
    """`cosine`, or where the top-1 agreement misses its target, `cosine` times the share reached:
    below any cosine aim, and higher the closer the argmax comes."""
    if target_top1 is None or top1 is None or top1 >= target_top1 or cosine <= 0:
        return cosine
    return cosine * top1 / target_top1


def recipe_key(assignment: dict[str, str], ranges: str = "min-max") -> str:
    """A recipe's name in the search's record: its non-int8 groups, and its ranges where not min/max."""
    key = ",".join(f"{k}={v}" for k, v in sorted(assignment.items()) if v != "int8")
    return key if ranges == "min-max" else f"{key or 'all int8'} [{ranges} ranges]"


def rounded(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def candidates_table(measured: dict, refused: dict[str, str]) -> list[dict]:
    """Every recipe the search measured, in order, with its numbers (the table a build below budget
    prints), and why the target refused it where it did."""
    return [
        {
            "recipe": key if key and not key.startswith(" [") else f"all int8{key}",
            "sample_cosine": rounded(m.sample_cosine),
            "centered_cosine": rounded(m.centered_cosine),
            "cosine": rounded(m.cosine),
            "top1_agreement": rounded(m.top1_agreement),
            **({"refused": refused[key]} if key in refused else {}),
        }
        for key, m in measured.items()
    ]


def strict_cost(strict, mixed, mixed_ops: list[dict], samples: int) -> dict:
    """Strict int8 next to the default mixed recipe on the same samples (cost = mixed - strict)."""

    def diff(name: str) -> float | None:
        a, b = getattr(mixed, name), getattr(strict, name)
        return None if a is None or b is None else rounded(a - b)

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
            "max_abs_error_ratio": rounded(strict.max_abs_error / mixed.max_abs_error) if mixed.max_abs_error else None,
        },
    }
