"""leaky_relu as max(x, a·x) (shared_ir/passes/leaky_relu_form.py)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.leaky_relu_form import LeakyReluAsMaximum
from tpuedge.shared_ir.program import Program


class Leaky(torch.nn.Module):
    """A darknet-style block (conv + LeakyReLU 0.1) and the default slope (0.01)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.act = torch.nn.LeakyReLU(0.1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = F.leaky_relu(self.act(self.conv(x)) * 2.0 - 0.5)
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(Leaky().eval(), (torch.from_numpy(_x(0)),), name="leaky")


def test_leaky_relu_becomes_a_maximum_exactly():
    program = _program()
    ep, result = LeakyReluAsMaximum()(program.exported_program)
    assert result.changed == 2
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "aten.leaky_relu.default" not in targets and targets.count("aten.maximum.default") == 2
    for seed in range(3):
        np.testing.assert_array_equal(Program(ep, name="leaky").run(_x(seed))[0], program.run(_x(seed))[0])


def test_slopes_outside_0_1_are_left_for_the_check():
    class Outside(torch.nn.Module):
        def forward(self, x):
            return F.leaky_relu(x, -0.2), F.leaky_relu(x, 1.5)

    program = tpuedge.export(Outside().eval(), (torch.zeros(1, 4),), name="outside")
    ep, result = LeakyReluAsMaximum()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


def test_mcu_builds_a_leaky_relu_network():
    """Old code: `check --target mcu` refused aten.leaky_relu (GREATER_EQUAL, MUL, SELECT: no int8 form)."""
    program = _program()
    assert program.check("mcu") == []
    assert_mcu_follows_float(program, lambda seed: [_x(seed)], seeds=(1, 2))
