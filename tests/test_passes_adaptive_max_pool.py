"""Adaptive max pools with even windows as plain max pools (shared_ir/passes/adaptive_max_pool.py)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.adaptive_max_pool import AdaptiveMaxPoolAsPool
from tpuedge.shared_ir.program import Program


class MaxPooled(torch.nn.Module):
    """timm's "avgmax" global pool, a 2x3 grid and a text CNN's max over time."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 + 8 * 6 + 8, 4)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        pooled = 0.5 * (F.adaptive_avg_pool2d(y, 1) + F.adaptive_max_pool2d(y, 1)).flatten(1)
        grid = F.adaptive_max_pool2d(y, (2, 3)).flatten(1)
        over_time = torch.nn.AdaptiveMaxPool1d(1)(y.flatten(2)).flatten(1)
        return self.head(torch.cat([pooled, grid, over_time], 1))


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 6)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(MaxPooled().eval(), (torch.from_numpy(_x(0)),), name="max_pooled")


def test_even_windows_become_max_pools_exactly():
    program = _program()
    ep, result = AdaptiveMaxPoolAsPool()(program.exported_program)
    assert result.changed == 3
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert not [t for t in targets if "adaptive_max" in t], targets
    for seed in range(3):
        np.testing.assert_array_equal(Program(ep, name="max_pooled").run(_x(seed))[0], program.run(_x(seed))[0])


def test_android_and_mcu_build_an_adaptive_max_pool():
    """Old code: `check` refused aten.adaptive_max_pool2d / adaptive_max_pool1d on both targets
    (litert-torch has no lowering for them)."""
    program = _program()
    assert program.check("android") == [] and program.check("mcu") == []
    android = tpuedge.build(program, "android", None, quantize="none")
    for seed in range(2):
        np.testing.assert_allclose(android.run(_x(seed))[0], program.run(_x(seed))[0], rtol=1e-5, atol=1e-5)
    assert_mcu_follows_float(program, lambda seed: [_x(seed)])


def test_uneven_windows_and_read_indices_are_left_alone():
    class Left(torch.nn.Module):
        def forward(self, x):
            values, indices = F.adaptive_max_pool2d(x, 2, return_indices=True)
            return F.adaptive_max_pool2d(x, 3), values, indices  # 8 rows into 3 windows: they overlap

    program = tpuedge.export(Left().eval(), (torch.zeros(1, 2, 8, 8),), name="left")
    ep, result = AdaptiveMaxPoolAsPool()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
