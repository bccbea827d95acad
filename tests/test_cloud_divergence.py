"""The cloud export's self-check says where the XLA forward parts from Program.run
(cloud/divergence.py): a jump at one op blames that op's lowering, a difference grown over the
ops before it does not."""

from __future__ import annotations

import jax
import pytest
import torch

import tpuedge
from tpuedge.cloud.divergence import describe_parting
from tpuedge.cloud.lowerings.registry import LOWERINGS
from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.ir_values import IRLayer


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.second(torch.sigmoid(self.first(x)) * 3.0)


def test_a_wrong_lowering_is_named_with_its_line(tmp_path, monkeypatch):
    """Old code: "the ATen->JAX lowering of one of its ops is wrong", no op named."""
    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")
    monkeypatch.setitem(LOWERINGS._entries, "aten.sigmoid.default", lambda x: jax.nn.sigmoid(x) * 1.05)
    torch.manual_seed(0)
    program = tpuedge.export(Gate().eval(), (torch.zeros(2, 8),), name="gate")
    with pytest.raises(InternalError) as caught:
        tpuedge.build(program, "cloud-tpu", tmp_path / "cloud")
    message = str(caught.value)
    assert "the first op off by more than 0.0001 of its scale is sigmoid" in message
    assert "test_cloud_divergence.py" in message and "a jump at that op" in message
    assert not (tmp_path / "cloud").exists()


def _layer(name: str) -> IRLayer:
    return IRLayer(name, 0, "aten.mul.Tensor", "", "model.py:3", (4,))


def test_a_difference_grown_over_many_ops_is_not_blamed_on_one():
    drift = [(_layer(f"mul_{i}"), 1e-6 * 3**i) for i in range(8)]  # 1e-6 ... 2.2e-3
    sentence = describe_parting(drift, 1e-4)
    assert "is mul_5 (mul) at model.py:3 (0.00024)" in sentence and "grew over the ops before it" in sentence
    assert describe_parting(drift[:4], 1e-4) == ""  # all within: no op to name


class Chaotic(torch.nn.Module):
    """A reduction (which XLA and torch sum in different orders) fed through the logistic map at
    r = 3.9, which doubles a relative difference every step or so: after 12 steps the two float32
    results part by more than 1e-4 of the output's scale with every op lowered right."""

    def __init__(self):
        super().__init__()
        self.project = torch.nn.Linear(4096, 16, bias=False)
        torch.nn.init.normal_(self.project.weight, std=1 / 64)

    def forward(self, x):
        z = torch.sigmoid(self.project(x)) * 0.5 + 0.25
        for _ in range(12):
            z = 3.9 * z * (1 - z)
        return z * 100


def test_float_rounding_the_model_amplifies_is_not_a_failed_export(tmp_path, monkeypatch):
    """Old code: InternalError ("differs from Program.run"), as a random-init EfficientNet-B0 got,
    though no op is lowered wrong: a 1-ulp change of the input moves torch's own output as much."""
    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")
    torch.manual_seed(0)
    program = tpuedge.export(Chaotic().eval(), (torch.zeros(1, 4096),), name="chaotic")
    artifact = tpuedge.build(program, "cloud-tpu", tmp_path / "cloud")
    check = artifact.manifest["verification"]
    assert float(check["float_rounding"]["input_ulp_sensitivity"]) > 0
    assert "amplifies float32 rounding" in check["float_rounding"]["why"]


def test_a_wrong_lowering_in_a_chaotic_model_still_fails(tmp_path, monkeypatch):
    """The allowance is what rounding does, not a blanket pass: a 5% error in the map stays an error."""
    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")
    monkeypatch.setitem(LOWERINGS._entries, "aten.sigmoid.default", lambda x: jax.nn.sigmoid(x) * 1.05)
    torch.manual_seed(0)
    program = tpuedge.export(Chaotic().eval(), (torch.zeros(1, 4096),), name="chaotic")
    with pytest.raises(InternalError, match="a 1-ulp change of the inputs moves"):
        tpuedge.build(program, "cloud-tpu", tmp_path / "cloud")
    assert not (tmp_path / "cloud").exists()
