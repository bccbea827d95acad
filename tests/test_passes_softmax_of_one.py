"""softmax-of-one: a softmax over an axis of size 1 (one token left at a small input size)
becomes ones, so mcu no longer meets the converter's float ops for it."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.softmax_of_one import SoftmaxOfOne
from tpuedge.shared_ir.program import Program


class _OneKey(torch.nn.Module):
    """Attention over a single key: the scores' last axis has size 1."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x, memory):
        scores = self.q(x) @ self.k(memory).transpose(-1, -2)  # (1, 4, 1)
        return torch.softmax(scores, dim=-1) @ self.v(memory)


def _samples(count: int):
    rng = np.random.default_rng(0)
    return [
        (rng.standard_normal((1, 4, 8)).astype(np.float32), rng.standard_normal((1, 1, 8)).astype(np.float32))
        for _ in range(count)
    ]


def test_a_softmax_over_one_key_is_ones_and_mcu_builds_it(tmp_path):
    """Before: the mcu build refused it ('DEQUANTIZE ... TFLite-Micro runs only integer graphs':
    the converter wrote the softmax as REDUCE_MAX/EXP/SUM/DIV, left float)."""
    torch.manual_seed(0)
    program = tpuedge.export(_OneKey().eval(), (torch.zeros(1, 4, 8), torch.zeros(1, 1, 8)), name="one_key")
    ep, result = SoftmaxOfOne()(program.exported_program)
    assert result.changed == 1
    assert not any("softmax" in str(n.target) for n in ep.graph.nodes)
    for x, memory in _samples(2):
        np.testing.assert_array_equal(Program(ep, name="o").run(x, memory)[0], program.run(x, memory)[0])

    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(32))
    assert "SOFTMAX" not in {o["op"] for o in art.manifest["tflm_ops"]}
    assert art.manifest["verification"]["held_out"]["tflm_vs_float"]["sample_cosine"] >= 0.99


def test_a_softmax_over_several_is_left_alone():
    program = tpuedge.export(torch.nn.Softmax(dim=-1), (torch.randn(1, 3),), name="soft")
    ep, result = SoftmaxOfOne()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
