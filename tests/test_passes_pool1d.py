"""1-D pools as 2-D pools over a height-1 view (shared_ir/passes/pool1d_as_2d.py)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.quantize.metrics import cosine
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.pool1d_as_2d import Pool1dAs2d
from tpuedge.shared_ir.program import Program


class AudioCNN(torch.nn.Module):
    """Pooling over time: a strided padded average, a max, a ceil-mode average without padding counts, a global average."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 8, 5, padding=2)
        self.head = torch.nn.Linear(8 * 4, 3)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = F.max_pool1d(F.avg_pool1d(y, 3, 2, 1), 2)
        y = F.avg_pool1d(y, 3, count_include_pad=False, ceil_mode=True)
        return self.head(F.adaptive_avg_pool1d(y, 4).flatten(1)), F.adaptive_avg_pool1d(y, 1).flatten(1)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 2, 96)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(AudioCNN().eval(), (torch.from_numpy(_x(0)),), name="audio_cnn")


def test_1d_pools_become_2d_pools_exactly():
    program = _program()
    ep, result = Pool1dAs2d()(program.exported_program)
    assert result.changed == 5
    assert not [k for k in Program(ep, name="audio_cnn").op_histogram if "pool1d" in k]
    for seed in range(3):
        for ours, reference in zip(Program(ep, name="audio_cnn").run(_x(seed)), program.run(_x(seed))):
            np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-6)


def test_mcu_builds_1d_pools():
    """Old code: `check --target mcu` refused aten.avg_pool1d, aten.max_pool1d and aten.adaptive_avg_pool1d."""
    program = _program()
    assert program.check("mcu") == []
    assert_mcu_follows_float(program, lambda seed: [_x(seed)])


def test_a_dilated_max_pool_is_left_alone():
    class Dilated(torch.nn.Module):
        def forward(self, x):
            return F.max_pool1d(x, 3, 1, 1, dilation=2)

    program = tpuedge.export(Dilated().eval(), (torch.zeros(1, 2, 16),), name="dilated")
    ep, result = Pool1dAs2d()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


def test_android_int8_takes_1d_pools():
    """Android lowers 1-D pools itself (the pass is mcu's). litert-torch's FX passes need their
    CanonicalizePass here: without it avg_pool1d lowers to STABLEHLO_REDUCE_WINDOW and
    ai-edge-quantizer stops on it, though bytes match on the zoo's other models."""
    program = _program()
    android = tpuedge.build(
        program,
        "android",
        None,
        quantize="int8",
        calibration=[[_x(seed)] for seed in range(10, 26)],
        allow_below_budget=True,
    )
    for ours, reference in zip(android.run(_x(1)), program.run(_x(1))):
        assert cosine(ours, reference) > 0.98
