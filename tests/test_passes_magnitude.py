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


class _AudioMagnitudes(torch.nn.Module):
    """The forms audio front ends write: a stabilizing constant, a clamp from below, three parts,
    squares as products of two slices of one tensor, and a broadcast pair."""

    def forward(self, x, gain):
        re, im = x[:, :8], x[:, 8:]
        return torch.cat(
            [
                torch.sqrt(re**2 + im**2 + 1e-6),
                torch.sqrt(torch.clamp(re * re + im * im, min=1e-4)),
                torch.sqrt(re**2 + im**2 + x[:, 4:12] ** 2),
                torch.sqrt(x[:, :8] * x[:, :8] + x[:, 8:] * x[:, 8:]),
                torch.sqrt(re**2 + gain**2),
            ],
            dim=1,
        )


def test_the_forms_audio_front_ends_write_become_projections_too():
    """Old code took only sqrt(a**2 + b**2) of one shape, each a single node: every one of these
    kept its power tensor."""
    program = tpuedge.export(_AudioMagnitudes().eval(), (torch.zeros(1, 16, 5), torch.zeros(1, 1, 5)), name="audio")
    ep, result = MagnitudeAsProjections()(program.exported_program)
    assert result.changed == 5
    ops = Program(ep, name="audio").op_histogram
    assert "aten.sqrt.default" not in ops and "aten.pow.Tensor_Scalar" not in ops
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 16, 5)) * 10.0 ** rng.uniform(-6, 3, (1, 16, 5))).astype(np.float32)
    gain = rng.standard_normal((1, 1, 5)).astype(np.float32)
    exact = program.run(x, gain)[0]
    got = Program(ep, name="audio").run(x, gain)[0]
    assert np.max(np.abs(got - exact) / exact) < 1.6e-3  # two nested levels at most: 0.08% each
