"""What `verify` returns: the checks, the task accuracy and the per-output numbers of one
artifact against the float IR. Plain data with `to_json`; report.py renders it (and imports
this module, never the other way round)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tpuedge.quantize.metrics import OutputMetrics
from tpuedge.verify.per_layer import LayerReport

__all__ = ["Check", "TaskAccuracy", "VerifyResult"]


@dataclass(frozen=True)
class Check:
    """One threshold applied to one measured value."""

    name: str  # "cosine", "top-1 agreement", "accuracy drop"
    subject: str  # the output it applies to
    value: float
    limit: float
    kind: str  # "min" or "max"
    passed: bool

    def describe(self) -> str:
        if self.name == "accuracy drop":
            value, limit = f"{self.value:.2f} pts", f"{self.limit:.2f} pts"
        elif self.name == "top-1 agreement":
            value, limit = f"{100 * self.value:.2f}%", f"{100 * self.limit:.2f}%"
        else:
            value, limit = f"{self.value:.6f}", f"{self.limit:g}"
        relation = ("≥" if self.kind == "min" else "≤") if self.passed else ("<" if self.kind == "min" else ">")
        need = "" if self.passed else " required"
        return f"{self.name} of {self.subject}: {value} {relation}{need} {limit}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TaskAccuracy:
    """Accuracy (%) of the float IR and of the runtime against labels, on one classifier output."""

    output: str
    labels: str
    float_accuracy: float
    runtime_accuracy: float

    @property
    def drop(self) -> float:
        """Percentage points lost in the runtime (negative: it did better)."""
        return self.float_accuracy - self.runtime_accuracy

    def to_json(self) -> dict:
        return {**asdict(self), "drop_points": self.drop}


@dataclass
class VerifyResult:
    model: str
    fingerprint: str
    artifact: str
    target: str
    runtime: str
    samples: int
    outputs: list[OutputMetrics]
    accuracy: TaskAccuracy | None = None
    checks: list[Check] = field(default_factory=list)
    layers: LayerReport | None = None
    fingerprint_checked: bool = True

    @property
    def passed(self) -> bool:
        """Every check holds, and something was checked (no checks is not a pass)."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "ir_fingerprint": self.fingerprint,
            "fingerprint_checked": self.fingerprint_checked,
            "artifact": self.artifact,
            "target": self.target,
            "runtime": self.runtime,
            "samples": self.samples,
            "passed": self.passed,
            "outputs": [o.to_json() for o in self.outputs],
            "accuracy": None if self.accuracy is None else self.accuracy.to_json(),
            "checks": [c.to_json() for c in self.checks],
            "failures": [c.describe() for c in self.failures],
            "layers": None if self.layers is None else self.layers.to_json(),
        }

    def __str__(self) -> str:
        """A few plain lines: verdict and checks (`report.render_text(result)` gives the tables)."""
        verdict = "passed" if self.passed else ("FAILED" if self.checks else "checked nothing")
        lines = [f"{self.artifact} ({self.runtime}) vs {self.model}: {verdict}, {self.samples} samples"]
        lines += [f"  {'pass' if c.passed else 'FAIL'} {c.describe()}" for c in self.checks]
        return "\n".join(lines)
