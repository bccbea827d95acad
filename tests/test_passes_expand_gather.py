"""expand-as-gather: an expand that a matrix product reads (grouped-query attention's repeated
keys) becomes a gather of constant positions, and the float model converts right again."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.expand_gather import ExpandAsGather
from tpuedge.shared_ir.program import Program


class _RepeatedKeys(torch.nn.Module):
    """One key head shared by two query heads (HF's repeat_kv), read transposed by a matmul."""

    def __init__(self):
        super().__init__()
        self.q, self.k = torch.nn.Linear(32, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        q = self.q(x).view(1, 16, 2, 16).transpose(1, 2)
        k = self.k(x).view(1, 16, 1, 16).transpose(1, 2)
        k = k[:, :, None].expand(1, 1, 2, 16, 16).reshape(1, 2, 16, 16)
        return torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1)


class _ElementwiseExpand(torch.nn.Module):
    def forward(self, x):
        return x * x[:, :1].expand(1, 8)


def _samples(count: int) -> list[np.ndarray]:
    return [np.random.default_rng(k).standard_normal((1, 16, 32)).astype(np.float32) for k in range(count)]


def test_repeated_keys_are_gathered_and_the_float_model_follows_torch(tmp_path):
    """Before: litert-torch wrote the expand as BROADCAST_TO and dropped the transpose after it
    (the BATCH_MATMUL multiplied q by k, not k^T): max error 0.23 on outputs of at most 0.2, the
    float build below its budget (HF Qwen3: every android scheme refused)."""
    torch.manual_seed(0)
    program = tpuedge.export(_RepeatedKeys().eval(), (torch.zeros(1, 16, 32),), name="gqa")
    ep, result = ExpandAsGather()(program.exported_program)
    assert result.changed == 1
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "aten.expand.default" not in ops and "aten.index_select.default" in ops
    x = _samples(1)[0]
    np.testing.assert_array_equal(Program(ep, name="g").run(x)[0], program.run(x)[0])  # exact

    art = tpuedge.build(program, "android", tmp_path / "android", quantize="none")  # meets the 0.99 budget
    worst = max(float(np.abs(program.run(s)[0] - art.run(s)[0]).max()) for s in _samples(4))
    assert worst < 1e-5, worst


def test_an_expand_that_only_elementwise_ops_read_is_left_alone():
    program = tpuedge.export(_ElementwiseExpand(), (torch.randn(1, 8),), name="ew")
    ep, result = ExpandAsGather()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
