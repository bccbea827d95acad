"""One-sided clamps on the IR: clamp(min=) as MAXIMUM, clamp(max=) as x - relu(x - max), so a
mean over a mask (`mask.sum(1).clamp(min=1e-9)`, MiniLM's pooling) builds for mcu; exact."""

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
        return pooled.clamp(max=0.4), torch.clamp_max(hidden, 0.2).clamp(-0.5, 0.5)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_Pool().eval(), (torch.zeros(1, 5, 6), torch.ones(1, 5, 1)), name="pool")


def _samples(count, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, 5, 6)).astype(np.float32), (rng.random((1, 5, 1)) > 0.3).astype(np.float32)]
            for _ in range(count)]


def test_one_sided_clamps_are_rewritten_two_sided_ones_stay():
    program = _program()
    ep, result = OneSidedClamps()(program.exported_program)
    rewritten = Program(ep, name="pool")
    assert result.changed == 3
    assert rewritten.op_histogram.get("aten.clamp.default") == 1  # the two-bound one
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
