"""A max over a dimension (max-over-time pooling, torch.amax) as halving MAXIMUMs of slices:
TFLite-Micro's REDUCE_MAX takes no int8 tensors, so the mcu check refused these models on
aten.amax / aten.max.dim. Exact: a max picks one of its inputs."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.reduce_max import ReduceMaxAsMaximum
from tpuedge.shared_ir.program import Program

from mcu_rewrite_helpers import assert_builds_for_mcu_within_budget


class _MaxPools(torch.nn.Module):
    """A text CNN's max over time (13 steps: odd sizes on the way down), amax over two dims kept,
    and amax over everything."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 16, 3)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):  # x: [N, 8, 15]
        h = torch.relu(self.conv(x))  # [N, 16, 13]
        pooled = h.max(dim=-1).values
        peak = torch.amax(h, dim=(1, 2), keepdim=True).flatten(1)
        return self.fc(pooled) + peak + torch.amax(x)


class _ArgMax(torch.nn.Module):
    def forward(self, x):
        values, indices = x.max(dim=1)
        return values + indices.float()


def test_max_over_a_dimension_becomes_maximums_with_the_same_numbers():
    torch.manual_seed(0)
    program = tpuedge.export(_MaxPools().eval(), (torch.zeros(1, 8, 15),), name="maxpools")
    ep, result = ReduceMaxAsMaximum()(program.exported_program)
    assert result.changed == 3
    ops = Program(ep, name="maxpools").op_histogram
    assert not {"aten.amax.default", "aten.max.dim"} & set(ops)
    x = np.random.default_rng(0).standard_normal((1, 8, 15)).astype(np.float32)
    np.testing.assert_array_equal(Program(ep, name="maxpools").run(x)[0], program.run(x)[0])
    assert program.check("mcu") == []  # old code: aten.amax.default, aten.max.dim


def test_a_max_whose_indices_are_read_is_left_for_the_check():
    program = tpuedge.export(_ArgMax().eval(), (torch.zeros(1, 5, 3),), name="argmax")
    ep, result = ReduceMaxAsMaximum()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


def test_max_over_time_pooling_runs_in_tflite_micro_within_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_MaxPools().eval(), (torch.zeros(1, 8, 15),), name="maxpools")
    assert_builds_for_mcu_within_budget(program, (1, 8, 15), {"reduce-max-as-maximum"}, tmp_path / "mcu")
