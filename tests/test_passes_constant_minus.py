"""A constant minus a computed tensor (shared_ir/passes/constant_minus.py): litert-torch
converts `c - y` as `y - c` where y comes out of its NHWC layout region."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.constant_minus import ConstantMinusAsNegAdd
from tpuedge.shared_ir.program import Program


class ConstantMinusConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.norm = torch.nn.BatchNorm2d(8)
        self.register_buffer("offset", torch.linspace(-1, 1, 8).view(1, 8, 1, 1))

    def forward(self, x):
        y = self.conv(x)
        return (
            1.0 - y,  # rsub.Scalar
            self.offset - self.depthwise(y),  # sub.Tensor(buffer, depthwise)
            0.5 - torch.relu(self.norm(y) * 2.0),  # through what the converter fuses
            3.0 - F.avg_pool2d(x, 2),  # no convolution at all
            2.0 - F.interpolate(y, scale_factor=2),
        )


class ConstantMinusOther(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, ids):
        return x - 1.0, x - self.linear(x), 1 - ids, 1.0 - self.linear.weight


def _sample(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_constant_minus_convolution_converts_with_its_sign():
    """Old code: the android float model returned y - c for each (max difference ~5)."""
    torch.manual_seed(0)
    model = ConstantMinusConv().eval()
    with torch.no_grad():
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    program = tpuedge.export(model, (torch.zeros(1, 3, 8, 8),), name="cminus")
    ep, result = ConstantMinusAsNegAdd()(program.exported_program)
    assert result.changed == 5
    x = _sample((1, 3, 8, 8))
    for ours, reference in zip(Program(ep, name="cminus").run(x), program.run(x)):
        np.testing.assert_array_equal(ours, reference)
    artifact = tpuedge.build(program, "android", None, quantize="none")
    for ours, reference in zip(artifact.run(x), program.run(x)):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_other_subtractions_are_left_alone():  # a tensor minus anything, integers, constants alone
    program = tpuedge.export(
        ConstantMinusOther().eval(), (torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.int64)), name="other"
    )
    ep, result = ConstantMinusAsNegAdd()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


class ReluOfConstantMinusConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(1.0 - self.conv(x))


def test_relu_of_constant_minus_convolution_meets_the_mcu_budget(tmp_path):
    """Old code: the int8 model computed relu(conv(x) - 1), mean cosine 0.0 against the float
    IR; the budget refused the build (exit 1)."""
    torch.manual_seed(0)
    program = tpuedge.export(ReluOfConstantMinusConv().eval(), (torch.zeros(1, 3, 8, 8),), name="rcminus")
    calibration = [[_sample((1, 3, 8, 8), seed)] for seed in range(40)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    assert artifact.manifest["accuracy_budget"]["met"]
