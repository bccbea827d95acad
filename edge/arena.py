"""The tensor arena, measured: the smallest `arena_size` TFLite-Micro allocates AND runs with.

Bisection to `ARENA_STEP` bytes on the host interpreter, then a recommended size with a stated
margin (host pointers are 64-bit, so host needs are an upper bound for the tensor data, but
vendor kernels (CMSIS-NN, ESP-NN) may ask for extra scratch buffers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpuedge.shared_ir.errors import InternalError, UserError

__all__ = ["ArenaSize", "measure_arena", "arena_fits", "ARENA_STEP", "ARENA_MARGIN"]

ARENA_STEP = 256
ARENA_MARGIN = 0.10  # recommended = measured * (1 + margin), rounded up to 1 KiB
_CEILING = 64 * 1024 * 1024


@dataclass(frozen=True)
class ArenaSize:
    measured_bytes: int  # smallest size (to ARENA_STEP) that allocated and ran
    recommended_bytes: int
    margin: float
    step: int = ARENA_STEP

    def to_json(self) -> dict:
        return {
            "measured_bytes": self.measured_bytes,
            "recommended_bytes": self.recommended_bytes,
            "margin": f"+{round(self.margin * 100)}%, rounded up to 1 KiB",
            "bisection_step_bytes": self.step,
            "measured_with": "tflite_micro host interpreter (allocate + invoke)",
        }


def arena_fits(tflite: bytes, arena_size: int, sample: Sequence[np.ndarray]) -> bool:
    """Whether TFLM allocates the model and runs `sample` (raw, tensor dtypes) in `arena_size` bytes."""
    from tpuedge.edge.tflm_runtime import TflmError, TflmRunner

    try:
        TflmRunner(tflite, arena_size).run_raw(sample)
        return True
    except TflmError:
        return False


def measure_arena(tflite: bytes, sample: Sequence[np.ndarray], margin: float = ARENA_MARGIN) -> ArenaSize:
    """Bisect the arena between a failing and a working size until they are ARENA_STEP apart."""
    hi = max(4096, ARENA_STEP * math.ceil(len(tflite) / ARENA_STEP))
    while not arena_fits(tflite, hi, sample):
        hi *= 2
        if hi > _CEILING:
            raise UserError(
                f"TFLite-Micro could not allocate and run the model even with a {_CEILING // 2**20} MiB arena; "
                "the model is far too large for a microcontroller: shrink its width or input size."
            )
    lo = 0
    while hi - lo > ARENA_STEP:
        mid = (lo + hi) // 2
        mid -= mid % 16  # TFLM aligns the arena to 16 bytes anyway
        if arena_fits(tflite, mid, sample):
            hi = mid
        else:
            lo = mid
    if not arena_fits(tflite, hi, sample):
        raise InternalError(f"arena bisection ended on a size that does not run ({hi} bytes)")
    recommended = 1024 * math.ceil(hi * (1 + margin) / 1024)
    return ArenaSize(measured_bytes=hi, recommended_bytes=recommended, margin=margin)
