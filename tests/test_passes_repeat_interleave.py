"""`repeat_interleave` by a constant count as one gather of constant positions: exact, and a
model repeating a query over windows as timm's GCViT does passes the mcu check (refused before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.repeat_interleave_gather import RepeatInterleaveAsGather
from tpuedge.shared_ir.program import Program


class _Repeat(torch.nn.Module):
    def __init__(self, repeats: int, dim: int):
        super().__init__()
        self.repeats, self.dim = repeats, dim

    def forward(self, x):
        return x.repeat_interleave(self.repeats, dim=self.dim)


@pytest.mark.parametrize("repeats, dim", [(2, 0), (3, 1), (4, -1)])
def test_repeat_interleave_becomes_a_gather_with_identical_values(repeats, dim):
    program = tpuedge.export(_Repeat(repeats, dim), (torch.zeros(2, 3, 5),), name="repeat")
    ep, (result,) = PassManager([RepeatInterleaveAsGather()]).run(program.exported_program)
    rewritten = Program(ep, name="repeat")
    assert result.changed == 1 and "aten.repeat_interleave.self_int" not in rewritten.op_histogram
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    np.testing.assert_array_equal(rewritten.run(x)[0], program.run(x)[0])


class _GlobalQuery(torch.nn.Module):
    """One query per image repeated over its 4 windows (GCViT's global attention)."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.q, self.kv = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, 2 * dim)

    def forward(self, x, pooled):  # x: [4 windows, 4 tokens, dim], pooled: [1, 4, dim]
        q = self.q(pooled).repeat_interleave(4, dim=0)
        k, v = self.kv(x).chunk(2, dim=-1)
        return torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v


def test_a_repeated_global_query_passes_the_mcu_check():
    torch.manual_seed(0)
    program = tpuedge.export(_GlobalQuery().eval(), (torch.zeros(4, 4, 8), torch.zeros(1, 4, 8)), name="global_query")
    assert program.check("mcu") == []
