"""sqrt(a**2 + b**2) as the largest of a few projections: within 0.08% of the magnitude in
float, with no tensor spanning the magnitude's range squared."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.magnitude import MagnitudeAsProjections
from tpuedge.shared_ir.program import Program


class _Magnitude(torch.nn.Module):
    def forward(self, x):
        b = x[:, 8:]
        return torch.sqrt(x[:, :8] ** 2 + b * b)


class _NotAMagnitude(torch.nn.Module):
    def forward(self, x):
        return torch.sqrt(x[:, :8] ** 2 + x[:, 8:]) + torch.sqrt(x[:, :8] ** 2 + x[:, :8] ** 2 * 0.5)


def test_a_magnitude_becomes_projections_within_a_thousandth():
    program = tpuedge.export(_Magnitude().eval(), (torch.zeros(1, 16, 5),), name="magnitude")
    ep, result = MagnitudeAsProjections()(program.exported_program)
    assert result.changed == 1
    ops = Program(ep, name="magnitude").op_histogram
    assert "aten.sqrt.default" not in ops and "aten.pow.Tensor_Scalar" not in ops
    # magnitudes over nine decades, at every angle
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 16, 5)) * 10.0 ** rng.uniform(-6, 3, (1, 16, 5))).astype(np.float32)
    exact = program.run(x)[0]
    got = Program(ep, name="magnitude").run(x)[0]
    assert np.max(np.abs(got - exact) / exact) < 8e-4


def test_other_square_roots_are_left_as_they_are():
    program = tpuedge.export(_NotAMagnitude().eval(), (torch.zeros(1, 16),), name="other")
    ep, result = MagnitudeAsProjections()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
