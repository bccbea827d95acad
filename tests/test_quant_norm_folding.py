"""Why tpuedge has no SmoothQuant pass for LayerNorm -> Linear: litert-torch's conversion already
folds a LayerNorm's per-channel scale into the Linears that read it, so a Linear's int8 input is
the normalized activation, whatever the norm's weight. Moving outlier channels from the norm's
weight into the Linears (SmoothQuant's rewrite) would be folded back the same way. If a
litert-torch release stops folding, this test fails and such a pass starts to pay."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge


class PreNormBlock(torch.nn.Module):
    """A pre-LN attention + MLP block whose norms scale four channels by `gain` and whose
    Linears divide the same input columns by it: one function for every gain."""

    def __init__(self, gain: float, width: int = 64):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.q, self.k, self.v = (torch.nn.Linear(width, width) for _ in range(3))
        self.fc1, self.fc2 = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)
        with torch.no_grad():
            for norm, readers in ((self.ln1, (self.q, self.k, self.v)), (self.ln2, (self.fc1,))):
                norm.weight[:4] *= gain
                for linear in readers:
                    linear.weight[:, :4] /= gain

    def forward(self, x):
        h = self.ln1(x)
        attended = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2) / 8.0, -1) @ self.v(h)
        return attended + self.fc2(torch.relu(self.fc1(self.ln2(x + attended))))


def _all_int8_cosine(gain: float, calibration, out) -> float:
    torch.manual_seed(0)
    program = tpuedge.export(PreNormBlock(gain).eval(), (torch.zeros(1, 16, 64),), name=f"prenorm_{gain:g}")
    art = tpuedge.build(program, "android", out, quantize="int8", calibration=calibration)
    return art.manifest["recipe"]["search"]["all_int8_cosine"]


def test_outlier_channels_in_a_norms_weight_cost_int8_nothing(tmp_path):
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 16, 64)).astype(np.float32)] for _ in range(32)]
    plain = _all_int8_cosine(1.0, calibration, tmp_path / "plain")
    outliers = _all_int8_cosine(200.0, calibration, tmp_path / "outliers")
    # were the norms' outputs quantized as the IR computes them, four channels 200x the rest would
    # leave the other 60 one or two int8 steps each, and all-int8 would collapse
    assert plain > 0.99 and abs(plain - outliers) < 1e-3, (plain, outliers)
