"""ATen's alias ops as the op each names (shared_ir/passes/alias_ops.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.alias_ops import AliasAsCanonicalOp, canonical_ops
from tpuedge.shared_ir.program import Program


class Aliased(torch.nn.Module):
    """ConvBERT's `torch.multiply`, and the other spellings users write."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.gate = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.multiply(self.fc(x), torch.sigmoid(x))
        h = torch.subtract(torch.divide(h, 2.0), torch.clip(self.gate(x), -1.0, 1.0))  # the clip fuses into the FC
        return torch.concat([h, torch.multiply(h, 0.5)], dim=-1)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 8)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(Aliased().eval(), (torch.from_numpy(_x(0)),), name="aliased")


def test_aliases_become_the_ops_they_name_exactly():
    program = _program()
    ep, result = AliasAsCanonicalOp()(program.exported_program)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert result.changed >= 5 and not set(targets) & set(canonical_ops())
    for seed in range(3):
        np.testing.assert_array_equal(Program(ep, name="aliased").run(_x(seed))[0], program.run(_x(seed))[0])


def test_every_alias_and_its_op_take_the_same_arguments():
    table = canonical_ops()
    aten = torch.ops.aten
    assert table[aten.multiply.Tensor] == aten.mul.Tensor and table[aten.greater.Scalar] == aten.gt.Scalar
    for alias, op in table.items():
        assert [a.name for a in alias._schema.arguments] == [a.name for a in op._schema.arguments]


def test_mcu_builds_the_aliases():
    """Old code: `check --target mcu` refused aten.multiply.Tensor, aten.divide.Scalar, ... (no lowering)."""
    program = _program()
    assert not program.check("mcu")
    assert_mcu_follows_float(program, lambda seed: (_x(seed),))
