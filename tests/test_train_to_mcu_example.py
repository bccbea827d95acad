"""examples/train_to_mcu runs from a checkout and keeps its promises (a subprocess: its own JAX with 8 host devices)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_train_to_mcu_example(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    done = subprocess.run(
        [sys.executable, "examples/train_to_mcu/train_to_mcu.py", "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "float training on 8 devices" in done.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["float_accuracy"] > 0.9 and results["test_samples"] == 1000
    # measured here, seed 0: PTQ loses 1.1 points, QAT 0.5 (README); the margins allow another CPU's rounding
    assert results["ptq_loss_points"] >= 0.5
    assert results["qat_loss_points"] <= results["ptq_loss_points"] - 0.3
    # SiLU's sigmoid grid turns TFLite-Micro's rare 1-step rounding differences into several
    # steps downstream (docs/training.md), so this model is held to top-1, not to 1 LSB
    assert results["tflm_vs_fake_quant_top1_agreement"] >= 0.97
    assert results["verify_passed"]
    assert (tmp_path / "out" / "qat_mcu" / "model.tflite").is_file() and (tmp_path / "out" / "ptq_mcu" / "model.tflite").is_file()
