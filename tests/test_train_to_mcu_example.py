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
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "float training on 8 devices" in done.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["float_accuracy"] > 0.9 and results["test_samples"] == 1000
    # measured here, seed 0: PTQ loses 1.1 points, QAT 0.5 (README); the margins allow another CPU's rounding
    assert results["ptq_loss_points"] >= 0.5
    assert results["qat_loss_points"] <= results["ptq_loss_points"] - 0.3
    assert results["qat_epoch_kept"] == 1 + max(
        range(len(results["qat_validation_accuracy_by_epoch"])),
        key=lambda e: (results["qat_validation_accuracy_by_epoch"][e], -e),
    )
    # the int8 eval computes with TFLite's kernel arithmetic: it predicts TFLite-Micro's int8 outputs
    assert results["tflm_vs_fake_quant_within_1_lsb"] >= 0.99
    assert results["tflm_vs_fake_quant_identical"] >= 0.99
    assert results["verify_passed"]
    assert (tmp_path / "out" / "qat_mcu" / "model.tflite").is_file() and (
        tmp_path / "out" / "ptq_mcu" / "model.tflite"
    ).is_file()
