"""The accuracy budget: the contract an android or mcu build must meet before it writes a model.

    budget = AccuracyBudget.from_options(min_cosine=0.99, min_top1=None, max_drop=None)
    result = check_budget(budget, reference, candidate, labels=None)   # on held-out / eval samples
    if not result.passed and not budget.allow_below: raise BudgetError(...)  # exit 1, nothing written

Numbers come from the one metrics module (`quantize.metrics`):
- min_cosine: every output's mean per-sample cosine against the float IR must reach it;
- min_top1 (default 0.99): the top-1 agreement with the float IR of every output that looks like
  class scores (`quantize.output_meaning`: a softmax, or a Linear head of 16+ classes) must
  reach it; given explicitly without a Program, of every classifier-shaped output;
- max_drop: task accuracy (argmax = label, first classifier-shaped output) may fall at most
  this many percentage points below the float IR's, on labelled evaluation data; that output is
  then judged by the task metric alone (the user's labels decide, not its cosine or top-1).
Backend-neutral: it knows samples and outputs, not converters. Its build options:
quantize/budget_options.py; the error and the console line: quantize/budget_report.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tpuedge.quantize.rollout import Rollout
from tpuedge.shared_ir.errors import UserError

__all__ = [
    "AccuracyBudget",
    "BudgetResult",
    "check_budget",
    "enforce_budget",
    "DEFAULT_MIN_COSINE",
    "DEFAULT_MIN_TOP1",
]

DEFAULT_MIN_COSINE = 0.99
DEFAULT_MIN_TOP1 = 0.99


@dataclass(frozen=True)
class AccuracyBudget:
    min_cosine: float = DEFAULT_MIN_COSINE
    min_top1: float | None = None
    max_drop: float | None = None  # percentage points of task accuracy
    allow_below: bool = False
    # outputs held to min_top1, by index: None = every classifier-shaped output (an explicit
    # --min-top1 without a Program); from a Program, those that look like class scores
    top1_outputs: tuple[int, ...] | None = None
    output_names: tuple[str, ...] = ()
    top1_why: tuple[str, ...] = ()  # per top1_outputs entry: why it counts as class scores
    cosine_outputs: tuple[int, ...] | None = None  # held to min_cosine: None = every output
    rollout: Rollout | None = None  # state fed back: every step of each sequence is measured
    decision_outputs: tuple[int, ...] = ()  # of top1_outputs: probabilities, agreement = same side of 0.5

    @classmethod
    def from_options(
        cls,
        *,
        min_cosine=None,
        min_top1=None,
        max_drop=None,
        allow_below_budget=False,
        has_labels: bool = False,
        program=None,
        budget_outputs=None,
        rollout=None,
        eval_samples: int | None = None,
    ) -> "AccuracyBudget":
        """Validated build options (UserError, before any conversion, for values that can't be met or read).
        program: the top-1 agreement is held on its outputs that look like class scores, at
        DEFAULT_MIN_TOP1 unless min_top1 says otherwise; without one only an explicit min_top1 holds it.
        budget_outputs ("name[:top1|:cosine],..."), rollout ("out=in,...:steps", needs eval_samples):
        see budget_build_options; both need the program."""
        min_cosine = DEFAULT_MIN_COSINE if min_cosine is None else float(min_cosine)
        if not -1.0 <= min_cosine <= 1.0:
            raise UserError(
                f"--min-cosine {min_cosine} is outside [-1, 1]; a cosine can't reach it. Give e.g. --min-cosine 0.99."
            )
        if min_top1 is not None and not 0.0 <= float(min_top1) <= 1.0:
            raise UserError(f"--min-top1 {min_top1} is a share of samples, in [0, 1]; give e.g. --min-top1 0.98.")
        if max_drop is not None:
            if not 0.0 <= float(max_drop) <= 100.0:
                raise UserError(f"--max-drop {max_drop} is in accuracy points, in [0, 100]; give e.g. --max-drop 1.")
            if not has_labels:
                raise UserError(
                    f"--max-drop {max_drop} compares task accuracy, which needs labelled evaluation data, and none was "
                    "given: pass --eval file.py:function returning (inputs, labels) or an .npz with a `labels` array, or drop "
                    "--max-drop."
                )
        top1_outputs, names, why, cosine_outputs, rolled, decisions = None, (), (), None, None, ()
        if program is not None:
            names, top1_outputs, why, cosine_outputs, decisions = _held_outputs(program, min_top1, budget_outputs)
            min_top1 = DEFAULT_MIN_TOP1 if min_top1 is None else min_top1
            if rollout is not None:
                from tpuedge.quantize.rollout import parse_rollout

                if eval_samples is None:
                    raise UserError(
                        f"--rollout {rollout} reads its sequences from the evaluation data, in order, and none was given: "
                        "pass --eval with the steps of each sequence one after another."
                    )
                rolled = parse_rollout(rollout, program, eval_samples)
        elif budget_outputs is not None or rollout is not None:
            raise UserError(
                "--budget-outputs and --rollout name a single-entry model's outputs; this build has none to name."
            )
        return cls(
            min_cosine,
            None if min_top1 is None else float(min_top1),
            None if max_drop is None else float(max_drop),
            bool(allow_below_budget),
            top1_outputs,
            names,
            why,
            cosine_outputs,
            rolled,
            decisions,
        )

    def search_top1(self, program) -> float | None:
        """The top-1 agreement the int8 search may aim at (QuantConfig.target_top1): the search reads
        the lowest top-1 over every (samples, classes) output, so only where those are exactly the
        class scores this budget holds (MTCNN's box offsets are 2-D too, and their argmax is no answer)."""
        shaped = {j for j, spec in enumerate(program.outputs) if _classifier_spec(spec.shape)}
        held = set(self.top1_outputs or ())
        return self.min_top1 if held and held == shaped else None

    def output_label(self, j: int) -> str:
        return f"output {j} ({self.output_names[j]})" if j < len(self.output_names) else f"output {j}"

    def to_json(self) -> dict:
        entry = {"min_cosine": self.min_cosine, "min_top1": self.min_top1, "max_drop_points": self.max_drop}
        if self.rollout is not None:
            entry["rollout"] = {"spec": self.rollout.spec, "steps": self.rollout.steps}
        if self.cosine_outputs is not None:
            entry["cosine_outputs"] = [self.output_label(j) for j in self.cosine_outputs]
        if self.top1_outputs is not None:
            entry["top1_outputs"] = [
                {"output": self.output_label(j), "why": w} for j, w in zip(self.top1_outputs, self.top1_why)
            ]
        return entry

    def describe(self) -> str:
        held = (
            "every output"
            if self.cosine_outputs is None
            else ", ".join(self.output_label(j) for j in self.cosine_outputs)
        )
        parts = [f"mean per-sample cosine >= {self.min_cosine} on {held or 'no output'}"]
        if self.min_top1 is not None and self.top1_outputs is None:
            parts.append(f"top-1 agreement >= {100 * self.min_top1:.1f}% on every classifier output")
        elif self.min_top1 is not None and self.top1_outputs:
            held = ", ".join(f"{self.output_label(j)}: {w}" for j, w in zip(self.top1_outputs, self.top1_why))
            parts.append(f"top-1 agreement >= {100 * self.min_top1:.1f}% on the class scores ({held})")
        if self.max_drop is not None:
            parts.append(f"task accuracy drop <= {self.max_drop} points")
        return "; ".join(parts)


def _classifier_spec(shape) -> bool:
    return len(shape) == 2 and str(shape[-1]).isdigit() and int(shape[-1]) >= 2


def _held_outputs(program, min_top1, budget_outputs):
    """(output names, top-1 outputs, why each, cosine outputs or None for all, decision outputs) of `program`."""
    from tpuedge.quantize.output_meaning import output_meanings

    meanings = output_meanings(program)
    names = tuple(m.name for m in meanings)
    explicit = min_top1 is not None  # asked for: every classifier-shaped output too, as before
    top1 = {
        j: m.why if m.class_scores else "classifier-shaped, --min-top1 given"
        for j, m in enumerate(meanings)
        if m.class_scores or (explicit and _classifier_spec(program.outputs[j].shape))
    }
    if budget_outputs is None:
        return names, tuple(top1), tuple(top1.values()), None, ()
    named_top1, cosine, decisions = {}, [], []
    entries = budget_outputs.split(",") if isinstance(budget_outputs, str) else list(budget_outputs)
    for entry in (e.strip() for e in entries):
        name, _, metric = entry.partition(":")
        if name not in names or metric not in ("", "top1", "cosine", "decision"):
            raise UserError(
                f"--budget-outputs {entry!r}: "
                + (
                    f"{program.name} has no output {name!r}"
                    if name not in names
                    else f"{metric!r} is no metric (top1, decision or cosine)"
                )
                + f". Its outputs: {', '.join(names)}; give NAME, "
                "NAME:top1 (its argmax), NAME:decision (a probability's side of 0.5) or NAME:cosine, separated by commas."
            )
        j = names.index(name)
        if metric in ("", "cosine") and j not in cosine:
            cosine.append(j)
        if metric == "top1" or (metric == "" and j in top1):
            named_top1[j] = top1.get(j, "named with :top1")
        if metric == "decision":
            named_top1[j] = "a probability: the side of 0.5, named with :decision"
            decisions.append(j)
    return names, tuple(named_top1), tuple(named_top1.values()), tuple(cosine), tuple(decisions)


@dataclass(frozen=True)
class BudgetResult:
    budget: AccuracyBudget
    sample_cosine: list[float]  # per output
    top1: list[float | None]  # per output (None: not classifier-shaped)
    float_accuracy: float | None
    accuracy: float | None
    samples: int
    inputs: str  # which samples, in words (held out, eval data, smoke inputs)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def drop_points(self) -> float | None:
        if self.float_accuracy is None or self.accuracy is None:
            return None
        return 100.0 * (self.float_accuracy - self.accuracy)

    def to_json(self, *, written_below: bool = False) -> dict:
        r = lambda x: None if x is None else round(float(x), 6)  # noqa: E731
        return {
            **self.budget.to_json(),
            "met": self.passed,
            "written_below_budget": written_below,
            "failures": list(self.failures),
            "measured": {
                "sample_cosine_per_output": [r(c) for c in self.sample_cosine],
                "top1_agreement_per_output": [r(t) for t in self.top1],
                "float_accuracy": r(self.float_accuracy),
                "accuracy": r(self.accuracy),
                "drop_points": r(self.drop_points),
            },
            "inputs": self.inputs,
            "samples": self.samples,
        }


def check_budget(
    budget: AccuracyBudget,
    reference: Sequence[Sequence[np.ndarray]],
    candidate: Sequence[Sequence[np.ndarray]],
    *,
    inputs: str,
    labels: np.ndarray | None = None,
) -> BudgetResult:
    """reference[i][j] / candidate[i][j]: output j of sample i (float IR / converted model)."""
    from tpuedge.quantize.metrics import (
        argmax_agreement,
        decision_agreement,
        is_classifier_shaped,
        mean_sample_cosine,
        stack_samples,
        task_accuracy,
        top1_agreement,
    )

    refs = [stack_samples([s[j] for s in reference]) for j in range(len(reference[0]))]
    gots = [
        stack_samples([np.asarray(s[j]).reshape(np.shape(reference[i][j])) for i, s in enumerate(candidate)])
        for j in range(len(refs))
    ]
    cosines = [mean_sample_cosine(r, g) for r, g in zip(refs, gots)]
    top1 = [top1_agreement(r, g) for r, g in zip(refs, gots)]
    held_top1 = (
        [j for j, t in enumerate(top1) if t is not None] if budget.top1_outputs is None else list(budget.top1_outputs)
    )
    for j in held_top1:  # a class-score output with leading axes past the samples: every row's argmax
        top1[j] = argmax_agreement(refs[j], gots[j]) if top1[j] is None else top1[j]
        if j in budget.decision_outputs:  # a probability: the decision taken from it
            top1[j] = decision_agreement(refs[j], gots[j])
    float_acc = acc = None
    head = None  # the output the labels score: with --max-drop, the task metric alone decides it
    if labels is not None:
        head = next((j for j, r in enumerate(refs) if is_classifier_shaped(r.shape)), None)
        if head is not None:
            float_acc, acc = task_accuracy(refs[head], labels), task_accuracy(gots[head], labels)
    decided_by_task = head if budget.max_drop is not None and float_acc is not None else None
    held_cosine = range(len(refs)) if budget.cosine_outputs is None else budget.cosine_outputs
    failures = [
        f"{budget.output_label(j)}: mean per-sample cosine {cosines[j]:.5f} < {budget.min_cosine}"
        for j in held_cosine
        if cosines[j] < budget.min_cosine and j != decided_by_task
    ]
    if budget.min_top1 is not None:
        failures += [
            f"{budget.output_label(j)}: {'decision (> 0.5)' if j in budget.decision_outputs else 'top-1'} agreement "
            f"{100 * top1[j]:.1f}% < {100 * budget.min_top1:.1f}%"
            for j in held_top1
            if top1[j] is not None and top1[j] < budget.min_top1 and j != decided_by_task
        ]
    result = BudgetResult(budget, cosines, top1, float_acc, acc, len(reference), inputs, failures)
    if budget.max_drop is not None:
        if result.drop_points is None:
            raise UserError(
                "--max-drop compares task accuracy on a classifier output (samples, classes) against the labels, and this "
                "model has no such output or the labels don't match the samples; drop --max-drop or use --min-cosine."
            )
        if result.drop_points > budget.max_drop + 1e-9:
            failures.append(
                f"task accuracy {100 * acc:.2f}% vs float {100 * float_acc:.2f}%: drop {result.drop_points:.2f} points > {budget.max_drop}"
            )
    return result


def enforce_budget(
    budget: AccuracyBudget,
    *,
    name: str,
    target: str,
    reference,
    candidate,
    inputs: str,
    labels,
    recipe: dict,
    summary,
    costliest=None,
) -> dict:
    """check_budget, then BudgetError (exit 1, before anything is written) unless --allow-below-budget;
    returns the manifest's accuracy_budget entry. costliest: called only for that error when the
    recipe ranks no IR points itself, returns `PointSensitivity` JSON rows, most costly first."""
    from tpuedge.quantize.budget_report import budget_error

    result = check_budget(budget, reference, candidate, inputs=inputs, labels=labels)
    if not result.passed and not budget.allow_below:
        if costliest is not None and not (recipe.get("sensitivity") or {}).get("top"):
            recipe = {**recipe, "sensitivity": {"top": costliest()}}
        raise budget_error(name, target, result, recipe, summary)
    return result.to_json(written_below=not result.passed)
