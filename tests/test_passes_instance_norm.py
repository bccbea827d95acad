"""Instance norm as a group norm with one group per channel (shared_ir/passes/instance_norm_groups.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.instance_norm_groups import InstanceNormAsGroupNorm
from tpuedge.shared_ir.program import Program


class Styled(torch.nn.Module):
    """A style-transfer block: conv, instance norm (affine and not), ReLU; and a 1-D one."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.affine = torch.nn.InstanceNorm2d(8, affine=True)
        self.plain = torch.nn.InstanceNorm2d(8)
        self.head = torch.nn.Conv2d(8, 3, 1)

    def forward(self, x):
        return self.head(torch.relu(self.plain(torch.relu(self.affine(self.conv(x))))))


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    module = Styled().eval()
    with torch.no_grad():  # a trained look: non-trivial affine parameters
        module.affine.weight.uniform_(0.5, 1.5), module.affine.bias.uniform_(-0.2, 0.2)
    return tpuedge.export(module, (torch.from_numpy(_x(0)),), name="styled")


def test_instance_norm_becomes_a_group_norm():
    program = _program()
    ep, result = InstanceNormAsGroupNorm()(program.exported_program)
    assert result.changed == 2
    assert "aten.instance_norm.default" not in Program(ep, name="styled").op_histogram
    for seed in range(3):
        np.testing.assert_allclose(
            Program(ep, name="styled").run(_x(seed))[0], program.run(_x(seed))[0], rtol=1e-5, atol=1e-5
        )


def test_mcu_builds_an_instance_norm_network():
    """Old code: `check --target mcu` refused aten.instance_norm."""
    program = _program()
    assert program.check("mcu") == []
    assert_mcu_follows_float(program, lambda seed: [_x(seed)])


def test_running_statistics_are_left_alone():
    module = torch.nn.InstanceNorm2d(4, track_running_stats=True).eval()
    program = tpuedge.export(module, (torch.zeros(1, 4, 5, 5),), name="running")
    ep, result = InstanceNormAsGroupNorm()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
