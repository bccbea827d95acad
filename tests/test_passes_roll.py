"""Swin's shifted windows on mcu: `torch.roll` as slices + concatenation (TFLite-Micro has no
ROLL), and its attention mask, built in forward from `x.new_zeros` filled in place, folded into
one constant. Both were refused by the mcu check (torchvision's swin_t, timm's swin_*)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.constant_fold import FoldConstants
from tpuedge.shared_ir.passes.roll_slices import RollAsSlices
from tpuedge.shared_ir.program import Program


class _Roll(torch.nn.Module):
    def __init__(self, shifts, dims):
        super().__init__()
        self.shifts, self.dims = shifts, dims

    def forward(self, x):
        return torch.roll(x, shifts=self.shifts, dims=self.dims)


@pytest.mark.parametrize("shifts, dims", [((-2, -2), (1, 2)), (3, 2), ((5, 0), (1, 2)), ((7,), (-1,))])
def test_roll_becomes_slices_and_cat_with_identical_values(shifts, dims):
    program = tpuedge.export(_Roll(shifts, dims), (torch.zeros(1, 5, 6, 3),), name="roll")
    ep, (result,) = PassManager([RollAsSlices()]).run(program.exported_program)
    rewritten = Program(ep, name="roll")
    assert result.changed == 1 and "aten.roll.default" not in rewritten.op_histogram
    x = np.random.default_rng(0).standard_normal((1, 5, 6, 3)).astype(np.float32)
    np.testing.assert_array_equal(rewritten.run(x)[0], program.run(x)[0])


class _ShiftedWindows(torch.nn.Module):
    """A Swin-style shifted-window block on a 4x4 map of 8 channels: roll by half a window, a
    mask built as torchvision builds it (new_zeros, filled region by region), attention inside
    2x2 windows, roll back."""

    def __init__(self, dim: int = 8, side: int = 4, window: int = 2):
        super().__init__()
        self.side, self.window, self.shift = side, window, window // 2
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):  # x: [1, side, side, dim]
        s, w, k = self.side, self.window, self.shift
        x = torch.roll(x, shifts=(-k, -k), dims=(1, 2))
        mask = x.new_zeros((s, s))
        count = 0
        for h in ((0, -w), (-w, -k), (-k, None)):
            for v in ((0, -w), (-w, -k), (-k, None)):
                mask[h[0] : h[1], v[0] : v[1]] = count
                count += 1

        def windows(t):
            return (
                t.view(-1, s // w, w, s // w, w, t.shape[-1]).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, t.shape[-1])
            )

        ids = windows(mask[None, :, :, None]).squeeze(-1)
        bias = (ids[:, None, :] != ids[:, :, None]).float() * -100.0
        q, k_, v_ = self.qkv(windows(x)).chunk(3, dim=-1)
        attn = torch.softmax(q @ k_.transpose(1, 2) + bias, dim=-1)
        y = self.proj(attn @ v_).view(1, s // w, s // w, w, w, -1).permute(0, 1, 3, 2, 4, 5).reshape(1, s, s, -1)
        return torch.roll(y, shifts=(k, k), dims=(1, 2))


def test_the_shifted_window_mask_folds_and_the_block_passes_the_mcu_check():
    torch.manual_seed(0)
    program = tpuedge.export(_ShiftedWindows().eval(), (torch.zeros(1, 4, 4, 8),), name="swin")
    folded, _ = FoldConstants()(program.exported_program)
    ops = set(Program(folded, name="folded").op_histogram)
    assert not {"aten.new_zeros.default", "aten.fill_.Scalar", "aten.fill_.Tensor", "aten.copy_.default"} & ops, ops
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(Program(folded, name="folded").run(x)[0], program.run(x)[0])
    assert program.check("mcu") == []
