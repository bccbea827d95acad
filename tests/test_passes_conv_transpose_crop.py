"""A padded transposed convolution as an unpadded one and a crop (shared_ir/passes/conv_transpose_crop.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.conv_transpose_crop import TransposedConvAsCrop
from tpuedge.shared_ir.program import Program


class Decoder(torch.nn.Module):
    """The usual upsamplers: k3 s2 p1 with and without output padding, k4 s2 p1, a grouped one and a 1-D one."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 8, 3, stride=2, padding=1, output_padding=1)
        self.odd = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, groups=2)
        self.even = torch.nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)
        self.audio = torch.nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1)

    def forward(self, image, frames):
        return self.even(torch.relu(self.odd(torch.relu(self.up(image))))), self.audio(frames)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, 4, 6, 6)).astype(np.float32), rng.standard_normal((1, 4, 10)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(Decoder().eval(), tuple(torch.from_numpy(x) for x in _inputs(0)), name="decoder")


def test_padding_becomes_a_crop():
    program = _program()
    ep, result = TransposedConvAsCrop()(program.exported_program)
    assert result.changed == 4
    for node in ep.graph.nodes:
        if node.op == "call_function" and "conv_transpose" in str(node.target):
            assert list(node.args[4]) in ([0], [0, 0]) and list(node.args[5]) in ([0], [0, 0])
    for seed in range(3):
        for ours, reference in zip(Program(ep, name="decoder").run(*_inputs(seed)), program.run(*_inputs(seed))):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_android_and_mcu_build_the_usual_upsamplers():
    """Old code: android stopped with an internal error (the converter failed to legalize the
    mhlo.convolution of k3 s2 p1), and mcu's check refused aten.conv_transpose2d: the data read
    ai-edge-quantizer's CONV_2D_TRANSPOSE as no builtin, so TRANSPOSE_CONV looked float-only."""
    program = _program()
    assert program.check("android") == [] and program.check("mcu") == []
    android = tpuedge.build(program, "android", None, quantize="none")
    for seed in range(2):
        for ours, reference in zip(android.run(*_inputs(seed)), program.run(*_inputs(seed))):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    assert_mcu_follows_float(program, _inputs)


def test_unpadded_and_wider_output_padding_are_left_alone():
    class Left(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.valid = torch.nn.ConvTranspose2d(2, 2, 3, stride=2)
            self.wide = torch.nn.ConvTranspose2d(2, 2, 3, stride=2, padding=0, output_padding=1)

        def forward(self, x):
            return self.valid(x), self.wide(x)

    program = tpuedge.export(Left().eval(), (torch.zeros(1, 2, 5, 5),), name="left")
    ep, result = TransposedConvAsCrop()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
