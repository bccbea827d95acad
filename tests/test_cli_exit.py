"""The `tpuedge` command leaves without tearing the interpreter down (tpuedge.cli.entry): what it
printed, wrote and exited with must be the same as a normal exit's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = f"{ROOT}/examples/models.py:build_mlp"


def _tpuedge(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TPUEDGE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tpuedge.cli", *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )


def test_a_build_prints_writes_and_exits_0_through_the_fast_exit(tmp_path):
    out = tmp_path / "out"
    done = _tpuedge(tmp_path, "build", MODEL, "--target", "android", "--quantize", "none", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    # the last lines reach a pipe (the streams are flushed before the process leaves)
    assert done.stdout.rstrip().splitlines()[-1] == f"wrote {out}"
    assert (out / "manifest.json").is_file() and (out / "model.tflite").is_file()
    assert not [p for p in (tmp_path / "cache").rglob(".*") if p.is_file()]  # no half-written cache entry


def test_a_user_error_after_torch_is_imported_keeps_exit_2_and_its_message(tmp_path):
    missing = tmp_path / "missing.npz"
    done = _tpuedge(
        tmp_path,
        "build",
        MODEL,
        "--target",
        "android",
        "--quantize",
        "int8",
        "--calibration",
        str(missing),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "missing.npz" in done.stderr
    assert not (tmp_path / "out").exists()
