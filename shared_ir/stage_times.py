"""Where a build's time goes: seconds per stage, each second counted once (a stage inside another
is taken out of the outer one's time), for `bench/cold_profile.py`.

    with timed("capture"):
        ep = torch.export.export(...)

TPUEDGE_STAGE_TIMES=path.json makes `tpuedge build` write the stages there when it finishes
(`write_stage_times`). The build counts the seconds before it started (`count_start_up`) and runs
inside one enclosing stage, so the stages add up to the process's wall time: what no named stage
claims shows as that enclosing stage's own seconds. Only the main thread is timed: helpers'
threads would count twice. Costs two clock reads per stage; nothing is recorded unless the
variable is set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["timed", "count_start_up", "write_stage_times", "process_seconds", "STAGE_TIMES_ENV", "START_UP", "UNNAMED"]

STAGE_TIMES_ENV = "TPUEDGE_STAGE_TIMES"
START_UP = "process start, imports, CLI"
UNNAMED = "build, in no named stage"
_SECONDS: dict[str, float] = {}
_OPEN: list[list] = []  # [stage, time its own clock last resumed]
_IMPORTED = time.perf_counter()


def _enabled() -> bool:
    return bool(os.environ.get(STAGE_TIMES_ENV)) and threading.current_thread() is threading.main_thread()


def process_seconds() -> float:
    """Wall seconds since this process started (Linux: from /proc; elsewhere since this module's
    import, which then misses the interpreter's own start)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, in clock ticks since boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _IMPORTED


@contextmanager
def timed(stage: str) -> Iterator[None]:
    """Count the block's seconds to `stage` (minus those of stages opened inside it)."""
    if not _enabled():
        yield
        return
    now = time.perf_counter()
    if _OPEN:  # the enclosing stage's clock stops while this one runs
        outer = _OPEN[-1]
        _SECONDS[outer[0]] = _SECONDS.get(outer[0], 0.0) + now - outer[1]
    _OPEN.append([stage, now])
    try:
        yield
    finally:
        now = time.perf_counter()
        _, resumed = _OPEN.pop()
        _SECONDS[stage] = _SECONDS.get(stage, 0.0) + now - resumed
        if _OPEN:
            _OPEN[-1][1] = now


def count_start_up() -> None:
    """Count the seconds from the process's start to now (the interpreter, imports, the CLI's
    parsing) as START_UP; call it once, where the build begins."""
    if _enabled() and START_UP not in _SECONDS:
        _SECONDS[START_UP] = process_seconds() - sum(_SECONDS.values())


def write_stage_times() -> None:
    """Write the stages to $TPUEDGE_STAGE_TIMES (when set), with the process's wall and CPU seconds."""
    path = os.environ.get(STAGE_TIMES_ENV)
    if not path:
        return
    cpu, wall = time.process_time(), process_seconds()
    Path(path).write_text(
        json.dumps(
            {
                "stages": {k: round(v, 4) for k, v in _SECONDS.items()},
                "process_wall_s": round(wall, 3),
                "process_cpu_s": round(cpu, 3),
            },
            indent=1,
        )
    )
