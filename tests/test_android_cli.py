"""`tpuedge build ... --target android` as a user runs it, and `tpuedge inspect model.tflite`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CNN = f"{EXAMPLES / 'models.py'}:build_cnn"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One real `tpuedge build` in a child process (a fresh clone's view: cwd outside the repo)."""
    work = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    np.savez(work / "cal.npz", x=rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    exe = Path(sys.executable).with_name("tpuedge")
    cmd = [
        str(exe),
        "build",
        CNN,
        "--target",
        "android",
        "--quantize",
        "int8",
        "--calibration",
        "cal.npz",
        "--out",
        "out",
    ]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=300)
    return work, proc


def test_build_exits_0_and_writes_the_artifact(built):
    work, proc = built
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (work / "out").iterdir()) == ["manifest.json", "model.tflite"]
    assert "accuracy vs float IR (8 held out from calibration" in proc.stdout  # 16 given: 8 calibrate, 8 measure
    assert "quantize int8" in proc.stdout


def test_bad_calibration_exits_2_and_keeps_old_outputs(built):
    work, _ = built
    before = {p.name: p.read_bytes() for p in (work / "out").iterdir()}
    np.savez(work / "bad.npz", x=np.zeros((16, 3, 28, 28), np.float32))
    code, _, err = run_cli(
        "build",
        CNN,
        "--target",
        "android",
        "--quantize",
        "int8",
        "--calibration",
        str(work / "bad.npz"),
        "--out",
        str(work / "out"),
    )
    assert code == 2
    assert "Calibration input 'x'" in err and "[1, 3, 32, 32]" in err
    assert {p.name: p.read_bytes() for p in (work / "out").iterdir()} == before
    # no staging left (out.build.log, beside the folder, is what the libraries printed, if anything)
    assert sorted(p.name for p in work.iterdir() if p.name != "out.build.log") == ["bad.npz", "cal.npz", "out"]


def test_inspect_shows_io_quant_ops_and_sizes(built):
    work, _ = built
    code, out, _ = run_cli("inspect", str(work / "out" / "model.tflite"))
    assert code == 0
    for text in ("in  x: float32[1, 3, 32, 32]", "weights", "graph", "ops:", "CONV_2D", "accuracy vs float IR"):
        assert text in out, out
    code, out, _ = run_cli("ops", "--target", "android")
    assert code == 0 and "core ATen coverage" in out


_PAD_6D = """
import torch
import torch.nn.functional as F


class Pad6(torch.nn.Module):
    def forward(self, x):
        return F.pad(x.reshape(1, 2, 2, 2, 4, 4), [0, 1]) * 2


def build():
    return Pad6().eval(), (torch.zeros(1, 2, 8, 8),)
"""


def test_a_converter_refusal_is_the_models_line_and_exit_2(tmp_path):
    """The check knows PAD, not that LiteRT's PAD stops at 5-D: the converter's verifier refuses
    it. Old code: "internal error (a bug in tpuedge)", a traceback, exit 1."""
    (tmp_path / "pad6.py").write_text(_PAD_6D)
    model = f"{tmp_path / 'pad6.py'}:build"
    assert run_cli("check", model, "--target", "android")[0] == 0
    code, _, err = run_cli(
        "build", model, "--target", "android", "--quantize", "none", "--no-cache", "--out", str(tmp_path / "out")
    )
    assert code == 2, err[-2000:]
    assert "converter refused pad6 at" in err and "pad6.py:8 (return F.pad(" in err and "at most 5-D" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
