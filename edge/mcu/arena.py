"""The tensor arena: the smallest `arena_size` TFLite-Micro allocates AND runs with.

This module probes in the calling process; `edge/arena_probe.measure_arena` runs it in a child
process, which is what builds use. Measured on the host interpreter (to ARENA_STEP bytes where the
allocator's own figure is the threshold, else a bisection to BISECTION_STEP), then a recommended size with a stated
margin (host pointers are 64-bit, so host needs are an upper bound for the tensor data, but
vendor kernels (CMSIS-NN, ESP-NN) may ask for extra scratch buffers).

Only an allocation failure means "arena too small". A missing kernel or a kernel that refuses
its tensors fails at every size, so it ends the bisection at once as a UserError naming the op
(`classify_tflm_error`); anything else TFLM says is an InternalError with its log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpuedge.shared_ir.errors import InternalError, UserError

__all__ = [
    "ArenaSize",
    "TflmFailure",
    "classify_tflm_error",
    "arena_fits",
    "bisect_arena",
    "recommended_size",
    "ARENA_STEP",
    "BISECTION_STEP",
    "ARENA_MARGIN",
    "kernel_crash_error",
]

ARENA_STEP = 16  # TFLM aligns the arena to 16 bytes: no size between two steps differs
BISECTION_STEP = 256  # where the allocator's figure is not the threshold: a bisection to this
ARENA_MARGIN = 0.10  # recommended = measured * (1 + margin), rounded up to 1 KiB
_CEILING = 64 * 1024 * 1024


@dataclass(frozen=True)
class ArenaSize:
    measured_bytes: int  # smallest size (to `step`) that allocated and ran
    recommended_bytes: int
    margin: float
    step: int  # ARENA_STEP where the allocator's figure was the threshold, else BISECTION_STEP

    def to_json(self) -> dict:
        return {
            "measured_bytes": self.measured_bytes,
            "recommended_bytes": self.recommended_bytes,
            "margin": f"+{round(self.margin * 100)}%, rounded up to 1 KiB",
            "bisection_step_bytes": self.step,
            "measured_with": "tflite_micro host interpreter (allocate + invoke)",
        }


_MISSING_KERNEL = re.compile(r"Didn't find op for builtin opcode '(\w+)'")
_KERNEL_FAILED = re.compile(r"Node (\w+) \(number \d+\) failed to (\w+)")
_ALLOCATION = re.compile(r"Failed to (resize buffer|allocate)|Arena size is too small|missing: \d+")


@dataclass(frozen=True)
class TflmFailure:
    """What a TFLM error was: "allocation" (arena too small), "missing-kernel", "kernel", "other"."""

    kind: str
    op: str | None
    detail: str

    def user_error(self) -> UserError:
        """A kernel failure as what it is: the op, TFLM's words, and the way out."""
        if self.kind == "missing-kernel":
            what = f"TFLite-Micro has no kernel for {self.op}"
        elif "kMaxInputNum" in self.detail:  # TFLM's CONCATENATION/PACK take at most 10 inputs
            what = (
                f"TFLite-Micro's {self.op} kernel takes at most 10 inputs and the model gives it more (a "
                "torch.cat or torch.stack of more than 10 tensors: join them in groups of at most 10, each "
                "group followed by an op such as a ReLU, since the converter merges directly nested ones)"
            )
        else:
            what = f"TFLite-Micro's {self.op} kernel refused the model's tensors (int8, or int16 where the int8 search chose it)"
        return UserError(
            f"{what} ({self.detail}), so the model can't run on a microcontroller; nothing was written. "
            f"Replace the PyTorch op that lowers to {self.op} (`tpuedge ops --target mcu` lists what runs in int8 "
            "on TFLite-Micro), or build for android, which runs it."
        )


def classify_tflm_error(error) -> TflmFailure:
    """Sort a `TflmError` by its log: allocation failure, missing kernel, failed kernel, other."""
    text = f"{error}\n{getattr(error, 'log', '')}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    missing = _MISSING_KERNEL.search(text)
    if missing:
        return TflmFailure(
            "missing-kernel", missing.group(1), f"Didn't find op for builtin opcode '{missing.group(1)}'"
        )
    failed = _KERNEL_FAILED.search(text)
    if failed:
        why = next(
            (line for line in lines if "!=" in line or "not supported" in line.lower() or "was not true" in line),
            failed.group(0),
        )
        return TflmFailure("kernel", failed.group(1), why.split(": ", 1)[-1] if why.startswith("TFLite-Micro") else why)
    if _ALLOCATION.search(text):
        return TflmFailure("allocation", None, lines[0] if lines else "")
    return TflmFailure("other", None, " | ".join(lines))


def _run(
    tflite: bytes, arena_size: int, sample: Sequence[np.ndarray], allocated: list | None = None, checked: bool = False
):
    """None when TFLM allocates and runs `sample` in `arena_size` bytes, else the TflmError;
    a run that fits appends what TFLM's allocator took to `allocated`, when given."""
    from tpuedge.edge.mcu.tflm_runtime import TflmError, TflmRunner

    try:
        runner = TflmRunner(tflite, arena_size, checked=checked)
        runner.run_raw(sample)
    except TflmError as exc:
        return exc
    if allocated is not None:
        allocated.append(runner.allocated_bytes())
    return None


def arena_fits(
    tflite: bytes, arena_size: int, sample: Sequence[np.ndarray], allocated: list | None = None, checked: bool = False
) -> bool:
    """Whether TFLM allocates the model and runs `sample` (raw, tensor dtypes) in `arena_size` bytes
    (when it does, what the allocator took is appended to `allocated`, if given; `checked`: the
    bytes were already read as a flatbuffer, `TflmRunner`'s check is skipped).

    False only when the arena was too small. A kernel whose Prepare can't get its scratch
    memory also reports "failed to prepare" (or "Too many buffers"), so a failure counts as a
    kernel's only when the largest arena fails too: then it raises UserError naming what fails
    there; anything else InternalError. (An unrolled 400-step LSTM's FULLY_CONNECTEDs, each with
    its own per-channel tables, ran out of a 2-4 MB arena in Prepare, "kernel_util.cc:516 false
    was not true"; the model failed at every size only at its 400-input CONCATENATION, and the
    build had named the FULLY_CONNECTED.)
    """
    error = _run(tflite, arena_size, sample, allocated, checked)
    if error is None:
        return True
    failure = classify_tflm_error(error)
    if failure.kind == "allocation":
        return False
    if failure.kind != "missing-kernel" and arena_size < _CEILING:
        at_ceiling = _run(tflite, _CEILING, sample, checked=checked)
        if at_ceiling is None:
            return False  # it needed more memory (kernel scratch buffers fail in their own words), not another kernel
        error, failure = at_ceiling, classify_tflm_error(at_ceiling)  # what fails whatever the arena
        if failure.kind == "allocation":
            return False  # too small even there: bisect_arena says the model is far too large
    if failure.kind in ("missing-kernel", "kernel"):
        raise failure.user_error() from error
    raise InternalError(
        f"TFLite-Micro failed with a {arena_size}-byte arena for a reason other than its size: {error}"
    ) from error


def bisect_arena(
    tflite: bytes, sample: Sequence[np.ndarray], crashed: Sequence[int] = (), note=None
) -> tuple[int, int]:
    """(the smallest size that allocates and runs, the step it is exact to); sizes in `crashed`
    count as failing without a try, and `note(size)` hears of each size before it is tried.

    The first size that runs also tells what TFLM's allocator took; that figure, rounded up to
    ARENA_STEP, is tried next, then ARENA_STEP below it. Where it is the threshold (the CNNs, KWS
    and Silero VAD measured), two runs give the size to 16 bytes. Where it is not (Resemblyzer's
    unrolled LSTM took 7,934,512 B in a big arena and needs 8,099,136), a bisection to
    BISECTION_STEP goes on from the bounds those runs gave: a 16-byte one took more runs than
    the 256-byte bisection before (its arena probe 41.8 -> 52.2 s)."""

    from tpuedge.edge.flatbuffer import tflite_file

    tflite_file.read_model(tflite)  # the flatbuffer checked once, not at every size tried

    def fits(size: int, allocated: list | None = None) -> bool:
        if size in crashed:
            return False
        if note is not None:
            note(size)
        return arena_fits(tflite, size, sample, allocated, checked=True)

    hi = max(4096, BISECTION_STEP * math.ceil(len(tflite) / BISECTION_STEP))
    allocated: list = []
    while not fits(hi, allocated):
        hi *= 2
        if hi > _CEILING:
            raise (
                kernel_crash_error(crashed)
                if crashed
                else UserError(
                    f"TFLite-Micro could not allocate and run the model even with a {_CEILING // 2**20} MiB arena; "
                    "the model is far too large for a microcontroller: shrink its width or input size."
                )
            )
    lo = 0
    guess = ARENA_STEP * math.ceil(allocated[0] / ARENA_STEP) if allocated and allocated[0] else None
    if guess is not None and guess < hi:
        if not fits(guess):
            lo = guess
        elif not fits(guess - ARENA_STEP):
            return guess, ARENA_STEP
        else:
            hi = guess
    while hi - lo > BISECTION_STEP:
        mid = (lo + hi) // 2
        mid -= mid % ARENA_STEP
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi, BISECTION_STEP


def kernel_crash_error(crashed: Sequence[int]) -> UserError:
    """TFLite-Micro crashed at every arena size the probe tried (`crashed`, sorted here): a kernel
    aborted, not the memory. timm's PiT-tiny (SOFTMAX's Eval, int8, 730 tokens) crashed at every
    size and was called "far too large even with a 64 MiB arena"."""
    sizes = ", ".join(f"{size:,}" for size in sorted(crashed))
    return UserError(
        f"TFLite-Micro crashed (its process aborted) running the model with arenas of {sizes} bytes and ran it "
        "with none: one of its kernels aborts on this model instead of refusing it, so it can't run on a "
        "microcontroller as it is; nothing was written. Build for android, or replace the op TFLite-Micro stops "
        "in (run model.tflite in the tflite_micro interpreter under a debugger to see which)."
    )


def recommended_size(measured: int, margin: float = ARENA_MARGIN) -> int:
    return 1024 * math.ceil(measured * (1 + margin) / 1024)
