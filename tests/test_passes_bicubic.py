"""A bicubic resize (timm's CrossViT resizes its input; super-resolution skips) as two products
with constant matrices: TFLite-Micro has no bicubic kernel, and the mcu check refused it;
torch's resize is separable, so the rewrite matches it to float rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.bicubic_matmul import BicubicAsMatmuls
from tpuedge.shared_ir.program import Program

from mcu_rewrite_helpers import assert_builds_for_mcu_within_budget


class _Resize(torch.nn.Module):
    def __init__(self, **resize):
        super().__init__()
        self.resize = resize
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, mode="bicubic", **self.resize))


@pytest.mark.parametrize(
    "resize", [dict(size=(11, 14)), dict(scale_factor=2.5, align_corners=True), dict(scale_factor=(0.5, 1.5))]
)
def test_a_bicubic_resize_becomes_two_products_with_the_same_numbers(resize):
    torch.manual_seed(0)
    program = tpuedge.export(_Resize(**resize).eval(), (torch.zeros(1, 3, 8, 9),), name="resize")
    ep, result = BicubicAsMatmuls()(program.exported_program)
    assert result.changed == 1
    assert "aten.upsample_bicubic2d.vec" not in Program(ep, name="resize").op_histogram
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 9)).astype(np.float32)
    np.testing.assert_allclose(Program(ep, name="resize").run(x)[0], program.run(x)[0], rtol=1e-5, atol=1e-5)
    assert program.check("mcu") == []  # old code: aten.upsample_bicubic2d.vec


def test_a_bicubic_upscale_runs_in_tflite_micro_within_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_Resize(scale_factor=2.0).eval(), (torch.zeros(1, 3, 8, 8),), name="resize")
    assert_builds_for_mcu_within_budget(program, (1, 3, 8, 8), {"bicubic-as-matmuls"}, tmp_path / "mcu")
