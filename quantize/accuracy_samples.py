"""Which samples a build measures its accuracy on, and what to call them.

Calibration samples set the activation ranges and drive the precision search, so accuracy
measured on them flatters the model. A build measures on, in order of preference:
  1. evaluation data the user gave (`--eval`),
  2. a deterministic held-out tail of the calibration data (calibration then uses the rest),
  3. random normal inputs, which are a smoke check (does the model run and roughly match the
     float IR?), not an accuracy, and are labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "AccuracySamples",
    "split_calibration",
    "HOLD_OUT_FRACTION",
    "MIN_HELD_OUT",
    "EVAL",
    "HELD_OUT",
    "RANDOM",
    "CALIBRATION",
    "UNCALIBRATED",
]

HOLD_OUT_FRACTION = 0.25
MIN_HELD_OUT = 8
EVAL = "eval data"
HELD_OUT = "held out from calibration"
RANDOM = "random inputs: smoke check, not accuracy"
CALIBRATION = "calibration samples: too few to hold any out, so not an accuracy measure"
UNCALIBRATED = "calibration samples (this scheme calibrates nothing on them)"


@dataclass(frozen=True)
class AccuracySamples:
    samples: list[list[np.ndarray]]
    kind: str  # EVAL, HELD_OUT, RANDOM or CALIBRATION
    calibration_used: int  # how many calibration samples set the ranges

    def to_json(self) -> dict:
        return {"inputs": self.kind, "samples": len(self.samples), "calibration_samples_used": self.calibration_used}

    def with_calibration_used(self, count: int) -> "AccuracySamples":
        return replace(self, calibration_used=count)

    def describe(self) -> str:
        return f"{len(self.samples)} {self.kind}"


def split_calibration(samples: list, min_calibration: int) -> tuple[list, list]:
    """(calibration, held_out): the last HOLD_OUT_FRACTION (at least MIN_HELD_OUT) samples are held
    out when at least `min_calibration` remain for calibration; otherwise nothing is held out."""
    hold = max(MIN_HELD_OUT, int(len(samples) * HOLD_OUT_FRACTION))
    if len(samples) - hold < max(1, min_calibration):
        return list(samples), []
    return list(samples[:-hold]), list(samples[-hold:])
