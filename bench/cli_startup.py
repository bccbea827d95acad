"""How long `tpuedge --help` takes to start (goal < 0.3 s: no torch/jax/litert on that path).

    python bench/cli_startup.py [--runs 15] [--json bench/results/cli_startup.json]

Prints a table (median/min/max of whole-process wall time for `tpuedge --help`, beside a bare
`python -c pass` for scale) and writes JSON. Process start-up dominates, so the number that
matters is the difference from bare Python.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _time(cmd: list[str], runs: int) -> list[float]:
    subprocess.run(cmd, capture_output=True, check=True)  # warm the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path, default=Path("bench/results/cli_startup.json"))
    args = parser.parse_args()
    exe = shutil.which("tpuedge") or str(Path(sys.executable).with_name("tpuedge"))
    rows = {
        "python -c pass": _time([sys.executable, "-c", "pass"], args.runs),
        "tpuedge --help": _time([exe, "--help"], args.runs),
        "tpuedge build --help": _time([exe, "build", "--help"], args.runs),
    }
    print(f"{'command':<24}{'median s':>10}{'min s':>10}{'max s':>10}")
    result = {}
    for name, times in rows.items():
        med = statistics.median(times)
        result[name] = {"median_s": med, "min_s": min(times), "max_s": max(times), "runs": len(times)}
        print(f"{name:<24}{med:>10.3f}{min(times):>10.3f}{max(times):>10.3f}")
    goal = result["tpuedge --help"]["median_s"] < 0.3
    print(f"goal `tpuedge --help` < 0.3 s: {'met' if goal else 'MISSED'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"results": result, "goal_met": goal}, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
