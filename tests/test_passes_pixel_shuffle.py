"""Pixel (un)shuffle as reshape, permute, reshape (shared_ir/passes/pixel_shuffle_views.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.pixel_shuffle_views import PixelShuffleAsViews
from tpuedge.shared_ir.program import Program


class SuperResolution(torch.nn.Module):
    """ESPCN-style: features, a conv to 3·r² channels, pixel shuffle by r = 2; unshuffle on the way in."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.PixelUnshuffle(2)
        self.features = torch.nn.Conv2d(12, 16, 3, padding=1)
        self.to_pixels = torch.nn.Conv2d(16, 12, 3, padding=1)
        self.up = torch.nn.PixelShuffle(2)

    def forward(self, x):
        return self.up(self.to_pixels(torch.relu(self.features(self.down(x)))))


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(SuperResolution().eval(), (torch.from_numpy(_x(0)),), name="espcn")


def test_pixel_shuffles_become_views_exactly():
    program = _program()
    ep, result = PixelShuffleAsViews()(program.exported_program)
    assert result.changed == 2
    assert not [k for k in Program(ep, name="espcn").op_histogram if "pixel" in k]
    for seed in range(3):
        np.testing.assert_array_equal(Program(ep, name="espcn").run(_x(seed))[0], program.run(_x(seed))[0])


def test_mcu_builds_a_super_resolution_net():
    """Old code: `check --target mcu` refused aten.pixel_shuffle and aten.pixel_unshuffle."""
    program = _program()
    assert program.check("mcu") == []
    assert_mcu_follows_float(program, lambda seed: [_x(seed)])
