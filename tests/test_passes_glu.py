"""F.glu as a * sigmoid(b) (shared_ir/passes/glu_form.py)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.glu_form import GluAsSigmoidMul
from tpuedge.shared_ir.program import Program


class GatedConv(torch.nn.Module):
    """Speech2Text's subsampler / Conformer's convolution module: a conv to 2C channels, GLU over them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 16, 3, padding=1)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = F.glu(self.conv(x), dim=1)  # (1, 8, T)
        return self.head(F.glu(torch.cat([h, h * 0.5], -1), dim=-1).transpose(1, 2)).mean(1)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 4, 12)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(GatedConv().eval(), (torch.from_numpy(_x(0)),), name="gated")


def test_glu_becomes_a_sigmoid_gate_exactly():
    program = _program()
    ep, result = GluAsSigmoidMul()(program.exported_program)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert result.changed == 2 and "aten.glu.default" not in targets and targets.count("aten.sigmoid.default") == 2
    for seed in range(3):
        np.testing.assert_allclose(
            Program(ep, name="gated").run(_x(seed))[0], program.run(_x(seed))[0], rtol=1e-6, atol=1e-7
        )


def test_mcu_builds_a_gated_convolution():
    """Old code: `check --target mcu` refused aten.glu.default (no lowering)."""
    program = _program()
    assert not program.check("mcu")
    assert_mcu_follows_float(program, lambda seed: (_x(seed),))
