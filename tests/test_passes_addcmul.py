"""addcmul / addcdiv (ResMLP's affine layers, ConvNeXt-V2's global response normalization) and
square (MetaFormer's StarReLU) as MUL, DIV and ADD on the IR: the mcu check refused all three
models on these ops, which TFLite-Micro has no kernel for; exact in float."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.addcmul import AddcmulAsMulAdd
from tpuedge.shared_ir.program import Program

from mcu_rewrite_helpers import assert_builds_for_mcu_within_budget


class _AffineAndGrn(torch.nn.Module):
    """ResMLP's Affine (addcmul of per-channel parameters), ConvNeXt-V2's GRN, an addcdiv, and
    a StarReLU written with torch.square."""

    def __init__(self):
        super().__init__()
        self.alpha, self.beta = torch.nn.Parameter(torch.rand(16) + 0.5), torch.nn.Parameter(torch.randn(16))
        self.gamma, self.bias = (
            torch.nn.Parameter(torch.randn(1, 1, 1, 16)),
            torch.nn.Parameter(torch.randn(1, 1, 1, 16)),
        )
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):  # x: [N, H, W, C]
        x = torch.addcmul(self.beta, self.alpha, x)
        gx = torch.sqrt((x * x).sum(dim=(1, 2), keepdim=True) + 1e-6)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        x = torch.addcmul(self.bias, self.gamma, x * nx, value=0.5) + x
        x = torch.addcdiv(x, self.gamma, torch.sigmoid(x) + 1.0)
        return self.fc(0.8 * torch.square(torch.relu(x)) - 0.4).mean(dim=(1, 2))


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_AffineAndGrn().eval(), (torch.zeros(1, 4, 4, 16),), name="affine")


def test_addcmul_addcdiv_and_square_become_products_and_the_mcu_check_passes():
    program = _program()
    ep, result = AddcmulAsMulAdd()(program.exported_program)
    assert result.changed == 3
    ops = Program(ep, name="affine").op_histogram
    assert not {"aten.addcmul.default", "aten.addcdiv.default"} & set(ops)
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 16)).astype(np.float32)
    np.testing.assert_allclose(Program(ep, name="affine").run(x)[0], program.run(x)[0], rtol=1e-5, atol=1e-6)
    assert program.check("mcu") == []  # old code: aten.addcmul.default, aten.addcdiv.default, aten.square.default


def test_the_affine_and_grn_block_runs_in_tflite_micro_within_budget(tmp_path):
    program = _program()
    assert_builds_for_mcu_within_budget(
        program, (1, 4, 4, 16), {"addcmul-as-mul-add", "powers-as-products"}, tmp_path / "mcu"
    )
