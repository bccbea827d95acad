"""erf as tanh(a·z + b·z³) (shared_ir/passes/erf_tanh.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.erf_tanh import ErfAsTanh
from tpuedge.shared_ir.program import Program


class HandWrittenGelu(torch.nn.Module):
    """HF ESM's feed-forward: its GELU written out with torch.erf."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.up(x)
        return self.down(h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0))))


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 4, 16)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(HandWrittenGelu().eval(), (torch.from_numpy(_x(0)),), name="esm_ffn")


def test_erf_becomes_a_tanh_within_its_bound():
    class Erf(torch.nn.Module):
        def forward(self, z):
            return torch.erf(z)

    z = np.linspace(-6, 6, 4001, dtype=np.float32)[None]
    program = tpuedge.export(Erf(), (torch.from_numpy(z),), name="erf")
    ep, result = ErfAsTanh()(program.exported_program)
    assert result.changed == 1 and "aten.erf.default" not in {str(n.target) for n in ep.graph.nodes}
    error = np.abs(Program(ep, name="erf").run(z)[0] - program.run(z)[0]).max()
    assert 1e-5 < error < 3.7e-4  # an approximation, as the note says, within its bound


def test_mcu_builds_a_hand_written_gelu():
    """Old code: `check --target mcu` refused aten.erf.default (no lowering)."""
    program = _program()
    assert not program.check("mcu")
    assert_mcu_follows_float(program, lambda seed: (_x(seed),))
