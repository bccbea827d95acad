"""`--quantize auto`: the smallest, then fastest, recipe that meets the accuracy budget.

The backend builds every candidate scheme, measures each one's size, latency and accuracy budget
on the same held-out samples, and hands the results to `choose_recipe`:

    results = [AutoCandidate("int8", 24_576, 0.41, met=True, ...), AutoCandidate("fp16", ...), ...]
    chosen = choose_recipe(results)      # None: no candidate meets the budget

Candidates, smallest first in the usual case:
- "int8": static int8 with the per-op precision search, which may keep sensitive op groups at
  int16 activations (16x8) or as float islands: the mixed recipes. Needs calibration data.
- "dynamic-int8": int8 weights, activations quantized on the fly; no calibration.
- "fp16": float16 weights; no calibration.
- "none": the float model, which always matches the float IR up to float rounding.

The rule: among candidates that meet the budget, take the smallest; a candidate at most 5% larger
replaces it only when it is clearly faster (by 1.2x or more). The margins keep the choice stable on
a noisy machine: a second build of the same inputs must pick the same recipe. Knows no converter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "AUTO_SCHEMES",
    "AutoCandidate",
    "candidate_schemes",
    "choose_recipe",
    "auto_report",
    "auto_table",
    "candidates_from_json",
]

AUTO_SCHEMES = ("int8", "dynamic-int8", "fp16", "none")
SAME_SIZE = 1.05  # sizes within 5% count as one size: latency may decide among them
CLEARLY_FASTER = 1.2  # ... but only by a margin that machine noise does not cross


@dataclass(frozen=True)
class AutoCandidate:
    scheme: str
    bytes: int
    latency_ms: float
    met: bool
    sample_cosine: Sequence[float]  # per output, on the budget's samples
    top1: Sequence[float | None]
    failures: Sequence[str] = field(default_factory=tuple)
    detail: str = ""  # e.g. which op groups the int8 search kept at int16 or float

    def to_json(self) -> dict:
        r = lambda x: None if x is None else round(float(x), 6)  # noqa: E731
        return {
            "scheme": self.scheme,
            "bytes": self.bytes,
            "latency_ms": self.latency_ms,
            "met_budget": self.met,
            "sample_cosine_per_output": [r(c) for c in self.sample_cosine],
            "top1_agreement_per_output": [r(t) for t in self.top1],
            "failures": list(self.failures),
            "detail": self.detail,
        }


def candidates_from_json(entry: dict) -> tuple[list[AutoCandidate], AutoCandidate | None]:
    """(candidates, chosen) back from a manifest's recipe["auto"] entry."""
    candidates = [
        AutoCandidate(
            c["scheme"],
            c["bytes"],
            c["latency_ms"],
            c["met_budget"],
            c["sample_cosine_per_output"],
            c["top1_agreement_per_output"],
            tuple(c["failures"]),
            c.get("detail", ""),
        )
        for c in entry.get("candidates", [])
    ]
    return candidates, next((c for c in candidates if c.scheme == entry.get("chosen")), None)


def candidate_schemes(has_calibration: bool, integer_only: bool = False) -> tuple[str, ...]:
    """The schemes auto tries: without calibration data only those that need none; for int8 I/O
    or a strict int8 graph only static int8, the one scheme that gives them."""
    if integer_only:
        return ("int8",)
    return AUTO_SCHEMES if has_calibration else tuple(s for s in AUTO_SCHEMES if s != "int8")


def choose_recipe(candidates: Sequence[AutoCandidate]) -> AutoCandidate | None:
    passing = [c for c in candidates if c.met]
    if not passing:
        return None
    order = {s: i for i, s in enumerate(AUTO_SCHEMES)}
    smallest = min(passing, key=lambda c: (c.bytes, order.get(c.scheme, len(order))))
    same_size = [c for c in passing if c.bytes <= smallest.bytes * SAME_SIZE]
    fastest = min(same_size, key=lambda c: (c.latency_ms, c.bytes))
    return fastest if fastest.latency_ms * CLEARLY_FASTER <= smallest.latency_ms else smallest


def auto_report(
    candidates: Sequence[AutoCandidate], chosen: AutoCandidate | None, *, samples: int, inputs: str
) -> dict:
    """The manifest's recipe["auto"] entry: every candidate's numbers and the one taken."""
    return {
        "rule": f"smallest recipe that meets the accuracy budget; one at most {round(100 * (SAME_SIZE - 1))}% larger "
        f"wins when {CLEARLY_FASTER}x faster (LiteRT, 1 thread)",
        "chosen": None if chosen is None else chosen.scheme,
        "samples": samples,
        "inputs": inputs,
        "candidates": [c.to_json() for c in candidates],
    }


def auto_table(candidates: Sequence[AutoCandidate], chosen: AutoCandidate | None) -> list[str]:
    """Console/error lines: one row per candidate with its size, latency and accuracy."""
    lines = [f"  {'recipe':<14} {'bytes':>11} {'latency ms':>10} {'min cosine':>10} {'min top-1':>9}  budget"]
    for c in candidates:
        cos = min(c.sample_cosine) if c.sample_cosine else None
        tops = [t for t in c.top1 if t is not None]
        mark = "met" if c.met else "missed: " + "; ".join(c.failures)
        if chosen is not None and c.scheme == chosen.scheme:
            mark += "  <- chosen"
        lines.append(
            f"  {c.scheme:<14} {c.bytes:>11,} {c.latency_ms:>10.3f} "
            f"{'n/a' if cos is None else f'{cos:.5f}':>10} {f'{100 * min(tops):.1f}%' if tops else 'n/a':>9}  {mark}"
            + (f"  ({c.detail})" if c.detail else "")
        )
    return lines
