"""Long build stages show progress on a terminal (stage, step k of n, elapsed) and print nothing
when stderr is not one. Real CLI builds in child processes: a pipe is not a TTY,
and TPUEDGE_PROGRESS=1 draws as a terminal would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("litert-torch lowering to a float .tflite", "calibration on", "int8 search over", "--quantize auto")


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("progress") / "cal.npz"
    np.savez(path, x=np.random.default_rng(0).standard_normal((24, 1, 3, 32, 32)).astype(np.float32))
    return path


def _build(tmp_path: Path, calibration: Path, progress: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TPUEDGE_PROGRESS"}
    if progress is not None:
        env["TPUEDGE_PROGRESS"] = progress
    out = tmp_path / f"out_{progress}"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tpuedge.cli",
            "build",
            f"{ROOT}/examples/models.py:build_cnn",
            "--target",
            "android",
            "--calibration",
            str(calibration),
            "--out",
            str(out),
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "PYTHONPATH": str(ROOT)},
    )


def test_a_build_on_a_terminal_shows_each_stage(tmp_path, calibration):
    proc = _build(tmp_path, calibration, "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stage in STAGES:
        assert stage in proc.stderr, stage
    assert "int8: convert and measure" in proc.stderr and "0:00:" in proc.stderr  # the candidate, the elapsed time


@pytest.mark.parametrize("progress", [None, "0"], ids=["not-a-tty", "turned-off"])
def test_a_build_without_a_terminal_prints_no_progress(tmp_path, calibration, progress):
    proc = _build(tmp_path, calibration, progress)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [stage for stage in STAGES if stage in proc.stderr], proc.stderr
    assert "wrote" in proc.stdout


def test_a_step_after_its_stage_ended_is_harmless(monkeypatch):
    from tpuedge.shared_ir.progress import stage_progress

    monkeypatch.setenv("TPUEDGE_PROGRESS", "1")
    with stage_progress("outer", total=2) as step:
        step("one")
    step("late")  # the search may measure once more after its row is gone: no KeyError, no row back
    from tpuedge.shared_ir import progress

    assert progress._LIVE["progress"] is None and progress._LIVE["depth"] == 0
