"""A process's own peak resident memory, for the benchmarks' RSS columns.

Linux keeps a process's ru_maxrss across fork and exec: a child started by a parent holding
1.4 GB reports at least 1.4 GB through getrusage(RUSAGE_SELF) and wait4 alike. Every big model's
row in the zoo's table said 1403 MB on both sides, the zoo parent's size after its float
references. VmHWM in /proc/self/status is the high-water mark of the process's own address
space, which exec replaces.

    python bench/peak_rss.py REPORT.json -m MODULE ARGS...

runs MODULE as `python -m` would and writes {"peak_rss_mb": ...} to REPORT.json as it exits (from
its atexit hooks, which `tpuedge.cli` runs before its os._exit too).
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import runpy
import sys
from pathlib import Path

__all__ = ["own_peak_rss_mb"]


def own_peak_rss_mb() -> float:
    """This process's peak RSS in MB since its exec (VmHWM); ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "-m":
        raise SystemExit("usage: python bench/peak_rss.py REPORT.json -m MODULE [ARGS...]")
    report, module, args = Path(argv[0]), argv[2], argv[3:]
    atexit.register(lambda: report.write_text(json.dumps({"peak_rss_mb": round(own_peak_rss_mb(), 1)})))
    sys.path[0] = os.getcwd()  # as `python -m` has it (not this script's folder)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
