"""RMSNorm as x · rsqrt(mean(x²) + eps) · weight (shared_ir/passes/rms_norm_rsqrt.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.rms_norm_rsqrt import RmsNormAsRsqrt
from tpuedge.shared_ir.program import Program


class LlamaStyleBlock(torch.nn.Module):
    """Pre-norm MLP with RMSNorm (affine, default eps) and a functional one without weight (explicit eps)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.RMSNorm(32)
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x):
        y = x + self.down(torch.nn.functional.silu(self.up(self.norm(x))))
        return torch.nn.functional.rms_norm(y, [32], eps=1e-5)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 6, 32)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    module = LlamaStyleBlock().eval()
    with torch.no_grad():
        module.norm.weight.uniform_(0.5, 1.5)  # a trained look
    return tpuedge.export(module, (torch.from_numpy(_x(0)),), name="llama_block")


def test_rms_norm_is_written_out_exactly():
    program = _program()
    ep, result = RmsNormAsRsqrt()(program.exported_program)
    assert result.changed == 2
    assert "aten.rms_norm.default" not in Program(ep, name="b").op_histogram
    for seed in range(3):
        np.testing.assert_allclose(
            Program(ep, name="b").run(_x(seed))[0], program.run(_x(seed))[0], rtol=1e-5, atol=1e-5
        )


def test_mcu_builds_an_rms_norm_block():
    """Old code: `check --target mcu` refused aten.rms_norm."""
    program = _program()
    assert program.check("mcu") == []
    assert_mcu_follows_float(program, lambda seed: [_x(seed)])
