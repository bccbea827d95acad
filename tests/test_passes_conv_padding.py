"""A convolution's named padding ("same", "valid") written as numbers (shared_ir/passes/conv_padding.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.conv_padding import ConvPaddingAsNumbers
from tpuedge.shared_ir.program import Program


class NamedPadding(torch.nn.Module):
    """'same' with an even and an odd total (dilated, grouped, 2-D with one odd dim) and 'valid'."""

    def __init__(self):
        super().__init__()
        self.dilated = torch.nn.Conv1d(2, 4, 5, dilation=2, padding="same")
        self.even_kernel = torch.nn.Conv1d(4, 4, 4, padding="same", groups=2)
        self.valid = torch.nn.Conv1d(4, 3, 3, padding="valid", bias=False)
        self.image = torch.nn.Conv2d(1, 2, (2, 3), padding="same")

    def forward(self, sequence, image):
        return self.valid(torch.relu(self.even_kernel(self.dilated(sequence)))), self.image(image)


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, 2, 20)).astype(np.float32), rng.standard_normal((1, 1, 7, 9)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    example = tuple(torch.from_numpy(x) for x in _inputs())
    return tpuedge.export(NamedPadding().eval(), example, name="named_padding")


def test_named_padding_becomes_numbers_exactly():
    program = _program()
    ep, result = ConvPaddingAsNumbers()(program.exported_program)
    assert result.changed == 4
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert not [t for t in targets if t.endswith(".padding")], targets
    assert targets.count("aten.constant_pad_nd.default") == 2  # the even kernel's and the (2, 3) kernel's odd remainder
    for seed in range(3):
        x = _inputs(seed)
        for ours, reference in zip(Program(ep, name="named_padding").run(*x), program.run(*x)):
            np.testing.assert_array_equal(ours, reference)


def test_android_and_mcu_take_a_same_padded_convolution():
    """Old code: `check --target android` and the builds raised a RuntimeError from torch
    ("aten::convolution() Expected a value of type 'List[int]' for argument 'padding'")."""
    program = _program()
    assert program.check("android") == [] and program.check("mcu") == []
    artifact = tpuedge.build(program, "android", None, quantize="none")
    for seed in range(2):
        x = _inputs(seed)
        for ours, reference in zip(artifact.run(*x), program.run(*x)):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    assert_mcu_follows_float(program, _inputs)


def test_a_program_with_numbered_padding_is_returned_as_it_is():
    program = tpuedge.export(torch.nn.Conv1d(2, 2, 3, padding=1).eval(), (torch.zeros(1, 2, 8),), name="plain")
    ep, result = ConvPaddingAsNumbers()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
