"""Recipes as data, and the per-op precision search for static int8.

The backend finds the *sensitive* op groups of its graph (LayerNorm, softmax, GELU, attention
matmuls, recurrent state) and supplies `evaluate(assignment) -> cosine`, which quantizes with
those groups at the given precisions (everything else int8) and measures the result against
the float IR. `choose_precisions` then keeps every group int8 unless the measurements say it
costs accuracy, and picks int16 activations (16x8) or a float island by measured gain. It
knows nothing of any converter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

__all__ = [
    "PRECISIONS",
    "SENSITIVE_KINDS",
    "SensitiveGroup",
    "OpDecision",
    "PrecisionPlan",
    "choose_precisions",
    "upgrade_ranked",
    "float_ranked",
    "merge_by_kind",
    "FLOAT_FROM_THE_START",
    "scheme_summary",
]

# int16 = 16-bit activations with int8 weights ("16x8"); float = float compute (an island), its
# weights still int8; float32 = float compute and float32 weights (ranked weights, android only).
PRECISIONS = ("int8", "int16", "float", "float32")
SENSITIVE_KINDS = {
    "layer_norm": "normalization (mean/variance/rsqrt) over a few values: int8 loses the small variances",
    "softmax": "exponentials over a wide range of logits",
    "gelu": "a non-linearity with a small negative lobe",
    "attention_matmul": "activation x activation matmul: both sides carry quantization error",
    "recurrent_state": "state fed back through time accumulates quantization error",
    "fused_recurrent": "LiteRT's fused sequence LSTM computes in float (its weights int8 where measured cheap, edge/litert/fused_lstm_weights.py); the ops around it with it",
    "division": "a division by a computed tensor: LiteRT's int8 DIV refuses a divisor that rounds to its zero point",
    "ranked": "an op the IR sensitivity ranking (quantize/sensitivity.py) puts among the costliest in int8",
    "ranked_output": "an op writing a model output that reads a ranked op's value: float, so the output stays float",
    "ranked_weights": "the ops reading a weight tensor whose int8 values the IR weight ranking (quantize/weight_sensitivity.py) puts among the costliest: float32 weights",
    "every_op": "every op at the upgrade precision (16-bit activations on mcu, float compute on android; weights int8), where the groups fall short",
}
# kinds that are float in every candidate where floats are allowed (android, not --strict-int8),
# never searched: an int8 DIV stops LiteRT on any input whose divisor rounds to its zero point, a
# phone's as well as a calibration sample; searched one group at a time, a model with several
# (timm's EfficientViT-B0, one per attention) had every candidate refused but the every-op rung
FLOAT_FROM_THE_START = frozenset({"division", "fused_recurrent"})
# how many of the ranked groups `upgrade_ranked` tries at once, in turn
_RANKED_PREFIXES = (1, 2, 4, 8, 12, 16, 24)

# A group is upgraded only when that buys at least this much cosine (measured, not assumed).
_MIN_GAIN = 1e-4


@dataclass(frozen=True)
class SensitiveGroup:
    """A set of ops that get one precision together (one LayerNorm, one softmax, ...)."""

    key: str  # unique, e.g. "layer_norm:ln1" or "softmax:28"
    kind: str  # one of SENSITIVE_KINDS
    ops: tuple[str, ...] = field(default_factory=tuple)  # backend op descriptions, for reports


@dataclass(frozen=True)
class OpDecision:
    group: str
    kind: str
    precision: str
    reason: str
    cosine: Mapping[str, float]  # measured model cosine with this group at each precision
    ops: tuple[str, ...] = ()

    def to_json(self) -> dict:
        d = asdict(self)
        d["cosine"] = {k: round(float(v), 6) for k, v in sorted(self.cosine.items())}
        d["ops"] = list(self.ops)
        return d


@dataclass(frozen=True)
class PrecisionPlan:
    assignment: dict[str, str]  # group key -> precision
    decisions: list[OpDecision]
    all_int8_cosine: float | None
    final_cosine: float | None
    evaluations: int

    @property
    def non_int8(self) -> list[OpDecision]:
        return [d for d in self.decisions if d.precision != "int8"]


def _fmt(x: float) -> str:
    return f"{x:.5f}"


def choose_precisions(
    groups: Sequence[SensitiveGroup],
    evaluate: Callable[[dict[str, str]], float],
    *,
    strict_int8: bool = False,
    upgrade: str = "float",
    target_cosine: float = 0.995,
    screen: Callable[[dict[str, str]], float] | None = None,
) -> PrecisionPlan:
    """Pick int8 / int16 / float per sensitive group by measured model cosine.

    evaluate(assignment) quantizes with `assignment` (group key -> precision; groups not named
    are int8) and returns the cosine of the quantized outputs against the float IR.
    All-int8 first; if it meets `target_cosine`, or `strict_int8`, every group stays int8.
    Otherwise every group is measured at `upgrade` (the rest int8), and groups are
    upgraded in order of measured gain until the target is met; a group whose upgrade gains
    less than 1e-4, or lowers the model cosine given the upgrades before it, stays int8. The
    plan returned is never below any recipe `evaluate` measured on the way (all-int8 included).

    screen: a cheaper estimate of `evaluate` (fewer samples) for the one-group-at-a-time
    measurements, which only order the groups and pick int16 or float for each; every
    upgrade kept, and the best single upgrade, is then measured by `evaluate`.

    upgrade: the precision a group is measured at and may get; the int8 search passes its
    config's `upgrade_precision`: "int16" for an integer-only runtime (TFLite-Micro), "float"
    for LiteRT, where a float island runs on XNNPACK's float kernels and 16-bit activations on
    the reference ones (MiniLM-L6's int8 model: 77 ms per invoke with int16, 5.1 ms with float).
    """
    base = {g.key: "int8" for g in groups}
    c0 = evaluate(dict(base))
    count = 1
    if strict_int8 or not groups or c0 >= target_cosine:
        why = (
            "strict int8 requested: every op integer 8-bit"
            if strict_int8
            else f"all-int8 cosine {_fmt(c0)} meets the target {target_cosine}"
        )
        decisions = [OpDecision(g.key, g.kind, "int8", why, {"int8": c0}, g.ops) for g in groups]
        return PrecisionPlan(base, decisions, c0, c0, count)

    probe, s0 = (evaluate, c0) if screen is None else (screen, screen(dict(base)))
    count += screen is not None
    measured: dict[str, dict[str, float]] = {}  # by `probe`: `evaluate`'s numbers only without a screen
    for g in groups:
        measured[g.key] = {"int8": s0, upgrade: probe({**base, g.key: upgrade})}
        count += 1

    def choice(key: str) -> tuple[str, float]:
        return upgrade, measured[key][upgrade] - s0

    order = sorted(groups, key=lambda g: -choice(g.key)[1])
    assignment = dict(base)
    current = c0
    reasons: dict[str, str] = {}
    for g in order:
        precision, gain = choice(g.key)
        m = measured[g.key]
        detail = f"model cosine{'' if screen is None else ' screened'} " + ", ".join(
            f"{p} {_fmt(c)}" for p, c in m.items()
        )
        if current >= target_cosine:
            reasons[g.key] = f"int8 kept: target {target_cosine} reached without it ({detail})"
            continue
        if gain < _MIN_GAIN:
            reasons[g.key] = f"int8 kept: upgrading it gains < {_MIN_GAIN} ({detail})"
            continue
        trial = evaluate({**assignment, g.key: precision})
        count += 1
        if trial < current:  # gains measured alone need not add up: an upgrade that lowers the model is undone
            reasons[g.key] = (
                f"int8 kept: with the upgrades before it, it lowered the model cosine to {_fmt(trial)} ({detail})"
            )
            continue
        assignment[g.key] = precision
        current = trial
        label = "int16 activations (16x8)" if precision == "int16" else "float island"
        reasons[g.key] = f"{label}: {detail}; model cosine now {_fmt(current)}"
    # Never end below a recipe already measured: a single upgrade alone can beat the combination.
    best_key, best_precision = max(
        ((k, upgrade) for k in measured), key=lambda kp: measured[kp[0]][kp[1]], default=(None, None)
    )
    best = None if best_key is None else measured[best_key][best_precision]
    if screen is not None and best is not None:  # a screened number is not comparable with `current`
        if assignment == {**base, best_key: best_precision}:
            best = current  # the greedy kept it, measured in full
        elif best > s0:
            best = evaluate({**base, best_key: best_precision})
            count += 1
        else:
            best = None  # screened no better than all-int8: not worth a full measurement
    if best is not None and best > current:
        assignment = {**base, best_key: best_precision}
        current = best
        for g in groups:
            reasons[g.key] = (
                f"{best_precision} alone scored {_fmt(current)}, above every combination measured"
                if g.key == best_key
                else f"int8: the best recipe measured upgrades {best_key} alone ({reasons[g.key]})"
            )
    decisions = [OpDecision(g.key, g.kind, assignment[g.key], reasons[g.key], measured[g.key], g.ops) for g in groups]
    return PrecisionPlan(assignment, decisions, c0, current, count)


def merge_by_kind(
    groups: Sequence[SensitiveGroup],
) -> tuple[list[SensitiveGroup], Callable[[dict[str, str]], dict[str, str]]]:
    """One group per kind ("kind:layer_norm" holds every LayerNorm), for a search that measures a
    handful of recipes instead of up to three per group (DeiT-tiny has 73 groups). Returns (the
    merged groups, a function that turns an assignment of merged keys into one of the original
    keys; other keys pass through)."""
    members: dict[str, list[SensitiveGroup]] = {}
    for g in groups:
        members.setdefault(g.kind, []).append(g)
    merged = [
        SensitiveGroup(f"kind:{kind}", kind, tuple(op for g in gs for op in g.ops)) for kind, gs in members.items()
    ]

    def expand(assignment: dict[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, precision in assignment.items():
            kind = key.removeprefix("kind:")
            out.update(dict.fromkeys([g.key for g in members.get(kind, [])] if kind != key else [key], precision))
        return out

    return merged, expand


def scheme_summary(scheme: str, *, per_channel: bool = True, io_dtype: str = "float32") -> dict:
    """What a scheme means, in words a manifest reader understands (backend-neutral)."""
    gran = "per-channel" if per_channel else "per-tensor"
    return {
        "none": {"weights": "float32", "activations": "float32"},
        "fp16": {"weights": "float16 (dequantized to float32 at load)", "activations": "float32"},
        "dynamic-int8": {"weights": f"int8 symmetric {gran}", "activations": "float32, quantized on the fly per op"},
        "int8": {
            "weights": f"int8 symmetric {gran}",
            "activations": "int8 asymmetric per-tensor from calibration (sensitive ops chosen by measured error)",
            "io": io_dtype,
        },
    }[scheme]


def upgrade_ranked(
    groups: Sequence[SensitiveGroup],
    evaluate: Callable[[dict[str, str]], float],
    all_int8: float,
    *,
    target_cosine: float,
    precision: str = "int16",
) -> tuple[dict[str, str], float, list[tuple[int, float]]]:
    """`precision` (int16 activations, or float islands) for the first k "ranked" groups of
    `groups` (most sensitive first), k growing until the measured cosine meets `target_cosine`:
    a handful of measurements however many groups there are. A ranked group's "ranked_output"
    companion goes float with it where the upgrade is float (android), and stays int8 where it
    is int16 (an integer-only runtime: no float island). Returns (assignment, its cosine,
    [(k, cosine) measured]); the empty assignment (all-int8, `all_int8`) when no prefix
    measured better by at least 1e-4."""
    if precision != "float":
        groups = [g for g in groups if g.kind != "ranked_output"]
    return _ranked_prefixes(groups, evaluate, {}, all_int8, precision, target_cosine)


def float_ranked(
    groups: Sequence[SensitiveGroup],
    evaluate: Callable[[dict[str, str]], float],
    start: dict[str, str],
    start_cosine: float,
    *,
    target_cosine: float,
    precision: str = "float",
) -> tuple[dict[str, str], float, list[tuple[int, float]]]:
    """The last resorts where int16 and the kind groups left the model short of `target_cosine`
    (float allowed): the first k groups of `groups` (most costly first) at `precision` on top of
    `start`, k growing as in `upgrade_ranked`: float islands for the ranked points, or "float32"
    for the costliest weight tensors ("ranked_weights" groups). Float costs size and speed, so it
    comes after every int8/int16 recipe. Returns (assignment, its cosine, [(k, cosine) measured]);
    `start` when no prefix measured better by at least 1e-4."""
    return _ranked_prefixes(groups, evaluate, start, start_cosine, precision, target_cosine)


def _ranked_prefixes(
    groups, evaluate, start: dict[str, str], start_cosine: float, precision: str, target_cosine: float
):
    steps: list[list[SensitiveGroup]] = []  # each ranked group with the "ranked_output" companions after it
    for g in groups:
        if g.kind != "ranked_output" or not steps:
            steps.append([g])
        else:
            steps[-1].append(g)
    best: tuple[dict[str, str], float] = (start, start_cosine)
    tried: list[tuple[int, float]] = []
    prefixes = sorted({k for k in _RANKED_PREFIXES if k < len(steps)} | ({len(steps)} if steps else set()))
    for k in prefixes:
        upgrade = {g.key: "float" if g.kind == "ranked_output" else precision for step in steps[:k] for g in step}
        assignment = {**start, **upgrade}
        cosine = evaluate(assignment)
        tried.append((k, cosine))
        if cosine > best[1] + _MIN_GAIN:
            best = (assignment, cosine)
        if cosine >= target_cosine:
            break
    return best[0], best[1], tried
