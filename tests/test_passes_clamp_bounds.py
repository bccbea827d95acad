"""Clamps on the IR: clamp(min=) as MAXIMUM, clamp(max=) as -max(-x, -max), two bounds as both,
so a mean over a mask (`mask.sum(1).clamp(min=1e-9)`, MiniLM's pooling) or a `clamp(0, 1)` builds
for mcu; exact. Bounds the converter fuses as RELU6 / RELU_N1_TO_1 stay."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.clamp_bounds import OneSidedClamps
from tpuedge.shared_ir.program import Program


class _Pool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x, mask):
        hidden = self.fc(x)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-3)
        return pooled.clamp(max=0.4), torch.clamp_max(hidden, 0.2).clamp(-0.5, 0.5), hidden.clamp(0, 6)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_Pool().eval(), (torch.zeros(1, 5, 6), torch.ones(1, 5, 1)), name="pool")


def _samples(count, seed=0):
    rng = np.random.default_rng(seed)
    return [
        [rng.standard_normal((1, 5, 6)).astype(np.float32), (rng.random((1, 5, 1)) > 0.3).astype(np.float32)]
        for _ in range(count)
    ]


def test_clamps_are_rewritten_and_the_fused_bounds_stay():
    program = _program()
    ep, result = OneSidedClamps()(program.exported_program)
    rewritten = Program(ep, name="pool")
    assert result.changed == 4
    assert rewritten.op_histogram.get("aten.clamp.default") == 1  # clamp(0, 6): RELU6
    assert "aten.clamp_max.default" not in rewritten.op_histogram
    for sample in _samples(4, seed=1):
        for want, got in zip(program.run(*sample), rewritten.run(*sample), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_masked_mean_builds_for_mcu(tmp_path):
    """Old code: `aten.clamp.default: mcu has no lowering for this op`."""

    class MaskedMean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 4)

        def forward(self, x, mask):
            return self.fc((x * mask).sum(1) / mask.sum(1).clamp(min=1e-3))

    torch.manual_seed(0)
    program = tpuedge.export(MaskedMean().eval(), (torch.zeros(1, 5, 6), torch.ones(1, 5, 1)), name="masked_mean")
    assert program.check("mcu") == []
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(40))
    assert artifact.manifest["accuracy_budget"]["met"]


def test_a_clamp_between_0_and_1_builds_for_mcu(tmp_path):
    """Old code: `aten.clamp.default: mcu has no lowering for this op` (its MINIMUM stays float)."""

    class HardGate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)

        def forward(self, x):
            return (self.conv(x) * 0.2 + 0.5).clamp(0, 1).mean((2, 3))

    torch.manual_seed(0)
    program = tpuedge.export(HardGate().eval(), (torch.zeros(1, 3, 8, 8),), name="hard_gate")
    assert program.check("mcu") == []
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(40)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    assert artifact.manifest["accuracy_budget"]["met"]


def test_an_upper_bound_on_a_conv_output_runs_in_tflite_micro(tmp_path):
    """Old form x - relu(x - hi): a SUB with a fused RELU, and TFLite-Micro aborted (the arena
    probe's exit code -6) on the int8 model of a conv's output clamped from above."""

    class Capped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)

        def forward(self, x):
            return (self.conv(x) * 0.2 + 0.5).clamp(max=1.0).mean((2, 3))

    torch.manual_seed(0)
    program = tpuedge.export(Capped().eval(), (torch.zeros(1, 3, 8, 8),), name="capped")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(40)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    assert artifact.manifest["accuracy_budget"]["met"]
