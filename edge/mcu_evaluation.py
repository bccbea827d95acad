"""Labelled evaluation data for the android and mcu builds, named explicitly by `--eval`: a
`file.py:function` returning (inputs, labels), or an `.npz` of the inputs keyed by input name
with an optional `labels` array (one class index per sample)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tpuedge.shared_ir.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["Evaluation", "load_evaluation", "evaluation_from", "LABELS_KEY"]

LABELS_KEY = "labels"  # the labels array's name in an --eval .npz


@dataclass(frozen=True)
class Evaluation:
    source: str
    samples: list[list[np.ndarray]]
    labels: np.ndarray | None


def load_evaluation(spec: str, program: "Program") -> Evaluation:
    """`module:function` returning (inputs, labels) -> samples in the Program's input shapes."""
    from tpuedge.shared_ir.model_spec import load_factory
    from tpuedge.quantize.calibration import load_calibration

    fn = load_factory(spec)
    try:
        result = fn()
    except Exception as exc:
        raise UserError(
            f"The evaluation function {spec} raised {type(exc).__name__}: {exc}; fix it and retry."
        ) from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UserError(
            f"The evaluation function {spec} must return (inputs, labels): inputs an array with samples on the first "
            "axis (or a dict keyed by input name), labels one class index per sample."
        )
    inputs, labels = result
    samples = load_calibration(inputs, program, min_samples=1)
    labels = None if labels is None else np.asarray(labels).reshape(-1)
    if labels is not None and len(labels) != len(samples):
        raise UserError(
            f"{spec} returned {len(samples)} input samples but {len(labels)} labels; give one label per sample."
        )
    return Evaluation(spec, samples, labels)


def evaluation_from(eval_option, program: "Program") -> Evaluation | None:
    """The `--eval` option as given: None or "none" (no data), (inputs, labels) from Python, or a spec."""
    from tpuedge.quantize.calibration import load_calibration

    if eval_option is None or str(eval_option).lower() == "none":
        return None
    if isinstance(eval_option, tuple) and len(eval_option) == 2:
        samples = load_calibration(eval_option[0], program, min_samples=1)
        return Evaluation("(inputs, labels) given in Python", samples, np.asarray(eval_option[1]).reshape(-1))
    if str(eval_option).endswith((".npz", ".npy")):
        return _evaluation_file(Path(eval_option), program)
    return load_evaluation(str(eval_option), program)


def _evaluation_file(path: Path, program: "Program") -> Evaluation:
    """An .npz (or, for one input, .npy) of inputs keyed by input name, labels under LABELS_KEY."""
    from tpuedge.quantize.array_files import read_arrays
    from tpuedge.quantize.calibration import load_calibration

    if not path.is_file():
        raise UserError(
            f"Evaluation data {path} does not exist; pass an .npz of inputs keyed by input name "
            f"(and an optional {LABELS_KEY!r} array), or file.py:function returning (inputs, labels)."
        )
    arrays = read_arrays(path, "Evaluation file")
    labels = arrays.pop(LABELS_KEY, None)
    try:
        samples = load_calibration(arrays, program, min_samples=1)
    except UserError as exc:  # its messages speak of calibration data
        raise UserError(f"--eval {path}: {exc}") from None
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if len(labels) != len(samples) or not np.issubdtype(labels.dtype, np.integer):
            raise UserError(
                f"--eval {path}: {LABELS_KEY!r} must hold one integer class index per sample ({len(samples)}), "
                f"got {labels.dtype} with {len(labels)} values."
            )
    return Evaluation(str(path), samples, labels)
