"""mcu: a transformer block with GELU builds via the IR rewrite and runs in TFLM; unsupported ops
fail before anything is written (exit 2 in the CLI)."""

from __future__ import annotations

import numpy as np
import pytest

import tpuedge


def test_transformer_with_gelu_builds_and_runs_in_tflm(tmp_path):
    from models import build_transformer

    module, (x,) = build_transformer()
    program = tpuedge.export(module, (x,), name="block")
    rng = np.random.default_rng(0)
    cal = [(rng.standard_normal((1, 16, 64)).astype(np.float32),) for _ in range(32)]
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    m = art.manifest
    (rewrite,) = m["rewrites"]
    assert rewrite["pass"] == "gelu-to-sigmoid" and rewrite["changed"] == 1
    assert rewrite["accuracy_cost_vs_original_float"]["max_abs_error"] < 0.05  # stated cost of the rewrite
    assert "GELU" not in {o["op"] for o in m["tflm_ops"]} and "LOGISTIC" in {o["op"] for o in m["tflm_ops"]}
    # Stated error in TFLM vs the ORIGINAL float block (exact GELU), on fresh inputs: the block's
    # own contribution (output - residual input) keeps cosine >= 0.98 and RMS error <= 25% of its RMS
    # (a max-error bound would measure input clipping of the rare |x| > calibrated range, by design).
    test = [rng.standard_normal((1, 16, 64)).astype(np.float32) for _ in range(8)]
    ref = np.stack([program.run(t)[0] - t for t in test]).ravel()
    got = np.stack([art.run(t)[0] - t for t in test]).ravel()
    cos = float(ref @ got / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cos >= 0.98, cos
    assert np.sqrt(np.mean((ref - got) ** 2)) <= 0.25 * np.sqrt(np.mean(ref**2))
    assert m["verification"]["calibration"]["tflm_vs_litert_max_lsb"] <= 2  # measured 2 LSB on this block


MODEL_WITH_POW = '''
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__(); self.conv = nn.Conv2d(1, 4, 3)
    def forward(self, x):
        return self.conv(x).pow(3)
def build():
    return Net().eval(), (torch.zeros(1, 1, 8, 8),)
'''


def test_unsupported_op_exits_2_before_any_file(tmp_path, capsys):
    from tpuedge.cli import main

    model = tmp_path / "cube.py"
    model.write_text(MODEL_WITH_POW)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["build", f"{model}:build", "--target", "mcu", "--calibration", str(tmp_path / "none.npz"), "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "aten.pow" in err and "POW" in err and "cube.py" in err
    assert not out.exists()
