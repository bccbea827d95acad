"""`verify(artifact, model, data)`: an artifact in its real runtime against the float IR.

The artifact must come from the same IR as the model (manifest `ir_fingerprint` vs
`Program.fingerprint`); both run on the same samples; every output gets the numbers of
`quantize.metrics.compare_output` (the function build reports use too): max/mean abs error,
cosine, centered cosine, SNR and (classifier-shaped) top-1 agreement; with labels, both task accuracies and
the drop. Thresholds become `Check`s; `VerifyResult.passed` is True when all of them hold,
and there is always at least one: the cosine of every output against `DEFAULT_MIN_COSINE`
unless the caller sets its own (-1 turns it off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


from tpuedge.shared_ir.errors import UserError
from tpuedge.verify import DEFAULT_MIN_COSINE
from tpuedge.verify.data import VerifyData, load_data
from tpuedge.quantize.metrics import OutputMetrics, compare_output, task_accuracy
from tpuedge.verify.per_layer import DEFAULT_LAYER_SAMPLES, layer_report, runtime_label
from tpuedge.verify.result import Check, TaskAccuracy, VerifyResult
from tpuedge.verify.runner import check_interface, run_rows, single_torch_thread

__all__ = ["verify", "open_artifact", "open_program"]


def open_artifact(artifact: Any):
    if isinstance(artifact, (str, Path)):
        from tpuedge.shared_ir.artifact import load
        from tpuedge.shared_ir.program import Program

        opened = load(artifact)
        if isinstance(opened, Program):
            raise UserError(
                f"{artifact} is a saved Program, not a built artifact; pass the folder `tpuedge build` wrote."
            )
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
        from tpuedge.shared_ir.model_spec import load_program

        return load_program(str(model))
    if hasattr(model, "forward") and hasattr(model, "parameters"):
        raise UserError(
            "verify needs the exported Program the artifact was built from, not an nn.Module (exporting again "
            "could change the IR); pass tpuedge.export(model, example_inputs) or a MODEL spec."
        )
    raise UserError(
        f"Can't use a {type(model).__name__} as the model; pass a Program or a MODEL spec such as model.py:build."
    )


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
        float_acc = task_accuracy(reference[index], data.labels)
        if float_acc is not None:
            return TaskAccuracy(spec.name, labels_name, 100 * float_acc, 100 * task_accuracy(got[index], data.labels))
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
        raise UserError(
            "--max-drop compares task accuracy, which needs labels: pass --labels KEY (the labels array in the data)."
        )
    dataset = load_data(data, program.inputs, labels=labels)
    input_perms, output_perms = check_interface(program, artifact)

    with single_torch_thread():
        reference = run_rows(
            program.run,
            program.inputs,
            dataset.rows,
            whole_calls=dataset.whole_calls,
            label="float IR",
            progress=progress,
        )
    got = run_rows(
        artifact.run,
        artifact.inputs,
        dataset.rows,
        whole_calls=dataset.whole_calls,
        input_perms=input_perms,
        output_perms=output_perms,
        label=runtime_label(artifact),
        progress=progress,
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
        checks.append(
            Check("accuracy drop", accuracy.output, accuracy.drop, max_drop, "max", accuracy.drop <= max_drop)
        )

    layers = layer_report(artifact, program, dataset, samples=layer_samples) if per_layer else None
    return VerifyResult(
        model=program.name,
        fingerprint=program.fingerprint,
        artifact=str(artifact.directory),
        target=artifact.target,
        runtime=runtime_label(artifact),
        samples=dataset.count,
        outputs=outputs,
        accuracy=accuracy,
        checks=checks,
        layers=layers,
        fingerprint_checked=checked,
    )
