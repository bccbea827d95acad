"""`measure_arena`: the arena measurement (edge/mcu/arena.py) in a child process, so a TFLite-Micro
crash is a failed size, not the end of the build.

TFLite-Micro's host interpreter crashes the process outright at some arena sizes (measured: a
3-layer MLP at exactly 2048 bytes, while 2304 fails cleanly and 3072 runs). The parent writes
the model and the sample into a temporary folder and runs `main` there in a fresh interpreter
(edge/mcu/child_process.py). The child appends each size to
`tried.txt` before trying it and writes `result.json` at the end: the sizes, or the UserError /
InternalError it raised. A child killed by a signal crashed on the last size it wrote down;
the parent starts it again with that size marked, at most `_MAX_CRASHES` times.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tpuedge.edge.mcu.arena import (
    ARENA_MARGIN,
    ArenaSize,
    arena_fits,
    bisect_arena,
    kernel_crash_error,
    recommended_size,
)
from tpuedge.edge.mcu.child_process import child_folder, run_child
from tpuedge.shared_ir.errors import InternalError, UserError

__all__ = ["measure_arena", "main"]

_MAX_CRASHES = 8
_ERRORS = {"UserError": UserError, "InternalError": InternalError}


def measure_arena(tflite: bytes, sample: Sequence[np.ndarray], margin: float = ARENA_MARGIN) -> ArenaSize:
    """Measure the arena (`bisect_arena`); a size that crashed TFLite-Micro counts as failing,
    and the recommended size (measured + margin) is checked to run as well."""
    crashed: list[int] = []
    with child_folder("tpuedge-arena-") as work:
        (work / "model.tflite").write_bytes(tflite)
        np.savez(work / "sample.npz", *[np.asarray(x) for x in sample])
        while True:
            (work / "request.json").write_text(json.dumps({"crashed": crashed, "margin": margin}))
            for name in ("tried.txt", "result.json"):
                (work / name).unlink(missing_ok=True)
            done = run_child("tpuedge.edge.mcu.arena_probe.main", work)
            if (work / "result.json").is_file():
                result = json.loads((work / "result.json").read_text())
                if "error" in result:
                    raise _ERRORS.get(result["error"], InternalError)(result["message"])
                return ArenaSize(
                    measured_bytes=result["measured"],
                    recommended_bytes=result["recommended"],
                    margin=margin,
                    step=result["step"],
                )
            tried = (work / "tried.txt").read_text().split() if (work / "tried.txt").is_file() else []
            if done.returncode < 0 and tried and len(crashed) + 1 >= _MAX_CRASHES:
                raise kernel_crash_error(crashed + [int(tried[-1])])  # crashes at every size: a kernel aborts
            if done.returncode >= 0 or not tried:
                raise InternalError(
                    f"the TFLite-Micro arena probe ended with exit code {done.returncode} and no result "
                    f"(sizes that crashed it: {crashed or 'none'}). It printed:\n{done.stderr[-2000:]}"
                )
            crashed.append(int(tried[-1]))


def main() -> None:
    work = Path(sys.argv[1])
    request = json.loads((work / "request.json").read_text())
    crashed = set(request["crashed"])
    tflite = (work / "model.tflite").read_bytes()
    with np.load(work / "sample.npz") as data:
        sample = [data[f"arr_{i}"] for i in range(len(data.files))]
    with open(work / "tried.txt", "a") as tried:

        def note(size: int) -> None:
            tried.write(f"{size}\n")
            tried.flush()

        try:
            measured, step = bisect_arena(tflite, sample, sorted(crashed), note)
            recommended = recommended_size(measured, request["margin"])
            while recommended in crashed or not (
                note(recommended) or arena_fits(tflite, recommended, sample, checked=True)
            ):
                recommended += 1024  # the size we tell users to use must run, not only the measured one
            result = {"measured": measured, "recommended": recommended, "step": step}
        except (UserError, InternalError) as exc:
            result = {"error": type(exc).__name__, "message": str(exc)}
    (work / "result.json").write_text(json.dumps(result))
