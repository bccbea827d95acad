"""F.unfold (im2col: timm's TNT and VOLO) as a depthwise convolution with one-hot taps, so the
mcu check passes (it refused both on aten.im2col); exact in float."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.im2col_conv import Im2colAsConv
from tpuedge.shared_ir.program import Program

from mcu_rewrite_helpers import assert_builds_for_mcu_within_budget


class _Patches(torch.nn.Module):
    def __init__(self, kernel, stride, padding, dilation):
        super().__init__()
        self.args = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation)
        kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
        self.fc = torch.nn.Linear(3 * kh * kw, 5)

    def forward(self, x):
        patches = F.unfold(x, **self.args)  # (N, C*kh*kw, L)
        return self.fc(patches.transpose(1, 2))


@pytest.mark.parametrize(
    "kernel,stride,padding,dilation", [(4, 4, 0, 1), (3, 1, 1, 1), ((2, 3), (1, 2), (1, 0), (2, 1))]
)
def test_unfold_becomes_a_depthwise_convolution_with_the_same_numbers(kernel, stride, padding, dilation):
    torch.manual_seed(0)
    program = tpuedge.export(
        _Patches(kernel, stride, padding, dilation).eval(), (torch.zeros(1, 3, 12, 12),), name="patches"
    )
    ep, result = Im2colAsConv()(program.exported_program)
    assert result.changed == 1
    assert "aten.im2col.default" not in Program(ep, name="patches").op_histogram
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(Program(ep, name="patches").run(x)[0], program.run(x)[0], rtol=1e-6, atol=1e-6)
    assert program.check("mcu") == []  # old code: aten.im2col.default


def test_tnt_style_pixel_patches_run_in_tflite_micro_within_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_Patches(4, 4, 0, 1).eval(), (torch.zeros(1, 3, 12, 12),), name="patches")
    assert_builds_for_mcu_within_budget(program, (1, 3, 12, 12), {"im2col-as-conv"}, tmp_path / "mcu")
