"""The benchmarks' peak RSS is the child's own (bench/peak_rss.py): Linux carries ru_maxrss
across fork and exec, so wait4 and getrusage reported every zoo child at least as big as the zoo
parent (1403 MB on both sides of every large model's row)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
HELD_MB = 400


def test_a_child_reports_its_own_peak_rss_not_its_parents(tmp_path):
    held = bytearray(HELD_MB << 20)
    held[::4096] = b"\1" * len(held[::4096])  # resident, not just reserved
    data = tmp_path / "small.json"
    data.write_text("[1, 2, 3]")
    report = tmp_path / "rss.json"
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "peak_rss.py"), str(report), "-m", "json.tool", str(data)],
        stdout=subprocess.PIPE,
        text=True,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    own = json.loads(report.read_text())["peak_rss_mb"]
    assert 0 < own < HELD_MB / 4, own  # a Python running json.tool: ~10-20 MB
    # the trap it avoids: the kernel's figure for the same child includes this process's pages
    assert usage.ru_maxrss / 1024 >= HELD_MB, usage.ru_maxrss
    del held
