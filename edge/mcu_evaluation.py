"""Labelled evaluation data for the android and mcu builds, named explicitly by `--eval file.py:function`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tpuedge.shared_ir.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["Evaluation", "load_evaluation", "resolve_evaluation"]


@dataclass(frozen=True)
class Evaluation:
    source: str
    samples: list[list[np.ndarray]]
    labels: np.ndarray | None


def load_evaluation(spec: str, program: "Program") -> Evaluation:
    """`module:function` returning (inputs, labels) -> samples in the Program's input shapes."""
    from tpuedge.model_spec import load_factory
    from tpuedge.quantize.calibration import load_calibration

    fn = load_factory(spec)
    try:
        result = fn()
    except Exception as exc:
        raise UserError(f"The evaluation function {spec} raised {type(exc).__name__}: {exc}; fix it and retry.") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UserError(
            f"The evaluation function {spec} must return (inputs, labels): inputs an array with samples on the first "
            "axis (or a dict keyed by input name), labels one class index per sample."
        )
    inputs, labels = result
    samples = load_calibration(inputs, program, min_samples=1)
    labels = None if labels is None else np.asarray(labels).reshape(-1)
    if labels is not None and len(labels) != len(samples):
        raise UserError(f"{spec} returned {len(samples)} input samples but {len(labels)} labels; give one label per sample.")
    return Evaluation(spec, samples, labels)


def resolve_evaluation(spec: Any, program: "Program") -> "Evaluation | None":
    """--eval as given: None/'none', (inputs, labels) from Python, or `file.py:function`."""
    from tpuedge.quantize.calibration import load_calibration

    if isinstance(spec, tuple) and len(spec) == 2:  # (inputs, labels) from Python
        samples = load_calibration(spec[0], program, min_samples=1)
        labels = None if spec[1] is None else np.asarray(spec[1]).reshape(-1)
        if labels is not None and len(labels) != len(samples):
            raise UserError(f"--eval gave {len(samples)} input samples but {len(labels)} labels; give one label per sample.")
        return Evaluation("(inputs, labels) given in Python", samples, labels)
    if spec is None or str(spec).lower() == "none":
        return None
    return load_evaluation(str(spec), program)
