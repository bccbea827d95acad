"""Where a build's time goes: seconds per stage, each second counted once (a stage inside another
is taken out of the outer one's time), for `bench/cold_profile.py`.

    with timed("capture"):
        ep = torch.export.export(...)

TPUEDGE_STAGE_TIMES=path.json makes `tpuedge build` write the stages there when it finishes
(`write_stage_times`). Only the main thread is timed: helpers' threads would count twice.
Costs two clock reads per stage; nothing is recorded unless the variable is set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["timed", "write_stage_times", "STAGE_TIMES_ENV"]

STAGE_TIMES_ENV = "TPUEDGE_STAGE_TIMES"
_SECONDS: dict[str, float] = {}
_OPEN: list[list] = []  # [stage, time its own clock last resumed]


def _enabled() -> bool:
    return bool(os.environ.get(STAGE_TIMES_ENV)) and threading.current_thread() is threading.main_thread()


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


def write_stage_times() -> None:
    """Write the stages to $TPUEDGE_STAGE_TIMES (when set), with the process's CPU seconds."""
    path = os.environ.get(STAGE_TIMES_ENV)
    if not path:
        return
    cpu = time.process_time()
    Path(path).write_text(json.dumps({"stages": {k: round(v, 4) for k, v in _SECONDS.items()},
                                      "process_cpu_s": round(cpu, 3)}, indent=1))
