"""`verify(artifact, model, data)`: an artifact in its real runtime against the float IR.

The artifact must come from the same IR as the model (manifest `ir_fingerprint` vs
`Program.fingerprint`); both run on the same samples; every output gets max/mean abs error,
cosine, SNR and (classifier-shaped) top-1 agreement; with labels, both task accuracies and
the drop. Thresholds become `Check`s; `VerifyResult.passed` is True when all of them hold,
and there is always at least one: the cosine of every output against `DEFAULT_MIN_COSINE`
unless the caller sets its own (-1 turns it off).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.verify import DEFAULT_MIN_COSINE
from tpuedge.verify.data import VerifyData, load_data
from tpuedge.verify.metrics import OutputMetrics, compare_output, is_classifier_shaped
from tpuedge.verify.per_layer import DEFAULT_LAYER_SAMPLES, LayerReport, layer_report, runtime_label
from tpuedge.verify.runner import check_interface, reference_runner, run_rows, single_torch_thread

__all__ = ["verify", "VerifyResult", "Check", "TaskAccuracy", "open_artifact", "open_program"]


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

    def table(self, *, layers: int = 10) -> str:
        """Plain-text report (what a failing test prints)."""
        from tpuedge.verify.report import render_text

        return render_text(self, top_layers=layers)

    def __str__(self) -> str:
        return self.table()


def open_artifact(artifact: Any):
    if isinstance(artifact, (str, Path)):
        from tpuedge.shared_ir.artifact import load
        from tpuedge.shared_ir.program import Program

        opened = load(artifact)
        if isinstance(opened, Program):
            raise UserError(f"{artifact} is a saved Program, not a built artifact; pass the folder `tpuedge build` wrote.")
        return opened
    if not (hasattr(artifact, "run") and hasattr(artifact, "manifest")):
        raise UserError(
            f"Expected an artifact (a build folder, or what tpuedge.build/tpuedge.load return), got {type(artifact).__name__}."
        )
    return artifact


def open_program(model: Any):
    """A Program from a Program, a MODEL spec ("file.py:factory", "x.pt2") or an nn.Module."""
    from tpuedge.shared_ir.program import Program

    if isinstance(model, Program):
        return model
    if isinstance(model, (str, Path)):
        from tpuedge.model_spec import load_program

        return load_program(str(model))
    if hasattr(model, "forward") and hasattr(model, "parameters"):
        raise UserError(
            "verify needs the exported Program the artifact was built from, not an nn.Module (exporting again "
            "could change the IR); pass tpuedge.export(model, example_inputs) or a MODEL spec."
        )
    raise UserError(f"Can't use a {type(model).__name__} as the model; pass a Program or a MODEL spec such as model.py:build.")


def _check_fingerprint(artifact, program) -> bool:
    recorded = (getattr(artifact, "manifest", None) or {}).get("ir_fingerprint")
    if not recorded:
        return False
    if recorded != program.fingerprint:
        raise UserError(
            f"The artifact in {artifact.directory} was built from a different IR (fingerprint {recorded[:12]}) than "
            f"the model {program.name!r} (fingerprint {program.fingerprint[:12]}): its numbers would say nothing about "
            f"this model. Rebuild it with `tpuedge build MODEL --target {artifact.target}`, or pass the --model it was "
            "built from."
        )
    return True


def _classifier_outputs(program, outputs: list[OutputMetrics]) -> list[OutputMetrics]:
    return [o for o in outputs if o.top1_agreement is not None]


def _task_accuracy(program, reference, got, data: VerifyData, labels_name: str) -> TaskAccuracy:
    for index, spec in enumerate(program.outputs):
        ref = reference[index]
        if is_classifier_shaped(ref.shape) and len(ref) == data.count:
            float_acc = float(np.mean(np.argmax(ref, axis=-1) == data.labels)) * 100
            rt_acc = float(np.mean(np.argmax(got[index], axis=-1) == data.labels)) * 100
            return TaskAccuracy(spec.name, labels_name, float_acc, rt_acc)
    raise UserError(
        f"Labels were given but no output of {program.name} is a (samples, classes) score array "
        f"({', '.join(s.describe() for s in program.outputs)}); drop --labels/--max-drop for this model."
    )


def verify(
    artifact: Any,
    model: Any,
    data: Any,
    *,
    labels: Any = None,
    min_cosine: float | None = DEFAULT_MIN_COSINE,
    min_top1: float | None = None,
    max_drop: float | None = None,
    per_layer: bool = False,
    layer_samples: int = DEFAULT_LAYER_SAMPLES,
    progress: bool = False,
) -> VerifyResult:
    """Run `artifact` (folder or Artifact) and `model` (Program or MODEL spec) on `data`; compare.

    data: .npz path, dict of arrays keyed by input name, one array, or a list of input tuples.
    labels: key of the labels array in the npz/dict, or the labels themselves.
    min_cosine: every output's cosine with the float IR must reach it; DEFAULT_MIN_COSINE (0.99)
        unless given (None also means the default; -1 measures without a cosine check).
    min_top1 (fraction, e.g. 0.99): applies to every classifier-shaped output.
    max_drop: the largest accuracy loss allowed, in percentage points (needs labels).
    Raises UserError for input that doesn't fit (exit 2 in the CLI); thresholds that fail
    are reported in the result (`passed`, `failures`), not raised.
    """
    if min_cosine is None:
        min_cosine = DEFAULT_MIN_COSINE
    if min_top1 is not None and not 0.0 <= min_top1 <= 1.0:
        raise UserError(f"--min-top1 is a fraction of samples, e.g. 0.99 for 99%; got {min_top1}.")
    if min_cosine is not None and not -1.0 <= min_cosine <= 1.0:
        raise UserError(f"--min-cosine must lie in [-1, 1] (cosine similarity), got {min_cosine}.")
    artifact = open_artifact(artifact)
    program = open_program(model)
    checked = _check_fingerprint(artifact, program)
    if max_drop is not None and labels is None:
        raise UserError("--max-drop compares task accuracy, which needs labels: pass --labels KEY (the labels array in the data).")
    dataset = load_data(data, program.inputs, labels=labels)
    input_perms, output_perms = check_interface(program, artifact)

    with single_torch_thread():
        reference = run_rows(
            reference_runner(program), program.inputs, dataset.rows, whole_calls=dataset.whole_calls,
            label="float IR", progress=progress,
        )
    got = run_rows(
        artifact.run, artifact.inputs, dataset.rows, whole_calls=dataset.whole_calls,
        input_perms=input_perms, output_perms=output_perms,
        label=runtime_label(artifact.target), progress=progress,
    )
    outputs = [compare_output(spec.name, r, g) for spec, r, g in zip(program.outputs, reference, got)]

    accuracy = None
    if dataset.labels is not None:
        accuracy = _task_accuracy(program, reference, got, dataset, labels if isinstance(labels, str) else "labels")

    checks: list[Check] = []
    if min_cosine > -1.0:
        checks += [Check("cosine", o.name, o.cosine, min_cosine, "min", o.cosine >= min_cosine) for o in outputs]
    if min_top1 is not None:
        classifiers = _classifier_outputs(program, outputs)
        if not classifiers:
            raise UserError(
                f"--min-top1 needs a (samples, classes) output, and {program.name} has none "
                f"({', '.join(s.describe() for s in program.outputs)}); use --min-cosine instead."
            )
        checks += [
            Check("top-1 agreement", o.name, o.top1_agreement, min_top1, "min", o.top1_agreement >= min_top1)
            for o in classifiers
        ]
    if max_drop is not None and accuracy is not None:
        checks.append(Check("accuracy drop", accuracy.output, accuracy.drop, max_drop, "max", accuracy.drop <= max_drop))

    layers = layer_report(artifact, program, dataset, samples=layer_samples) if per_layer else None
    return VerifyResult(
        model=program.name,
        fingerprint=program.fingerprint,
        artifact=str(artifact.directory),
        target=artifact.target,
        runtime=runtime_label(artifact.target),
        samples=dataset.count,
        outputs=outputs,
        accuracy=accuracy,
        checks=checks,
        layers=layers,
        fingerprint_checked=checked,
    )
