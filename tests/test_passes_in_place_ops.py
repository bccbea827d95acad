"""In-place ops on a private value written out of place (`y += 1`, `y.mul_(s)`, ConViT's
`attn /= attn.sum(-1, keepdim=True)`): the same values, and the mcu check, which refused
`aten.mul_` and `aten.div_` though `aten.mul` and `aten.div` run, passes."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.in_place_ops import InPlaceAsOutOfPlace
from tpuedge.shared_ir.program import Program


class _InPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        before = y * 1.0  # read before the writes: the old value
        y += 1.0
        y.mul_(2.0)  # not rebound: later readers of `y` see it through the storage
        a = torch.softmax(y, -1)
        a /= a.sum(-1, keepdim=True)
        return torch.relu_(a) + before


class _View(torch.nn.Module):
    """A write through a view reaches its base: not a private value, left alone."""

    def forward(self, x):
        y = x * 2.0
        y[:, :4].mul_(3.0)
        return y


def test_in_place_ops_become_out_of_place_with_the_same_values():
    torch.manual_seed(0)
    program = tpuedge.export(_InPlace().eval(), (torch.zeros(2, 8),), name="in_place")
    ep, (result,) = PassManager([InPlaceAsOutOfPlace()]).run(program.exported_program)
    rewritten = Program(ep, name="in_place")
    assert result.details["rewritten"] == {"add.Tensor": 1, "mul.Tensor": 1, "div.Tensor": 1, "relu.default": 1}
    assert not [k for k in rewritten.op_histogram if k.split(".")[1].endswith("_")]
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(rewritten.run(x)[0], program.run(x)[0], rtol=1e-6, atol=1e-6)
    assert program.check("mcu") == []


def test_a_write_through_a_view_is_left():
    program = tpuedge.export(_View(), (torch.zeros(2, 8),), name="view")
    _, (result,) = PassManager([InPlaceAsOutOfPlace()]).run(program.exported_program)
    assert result.changed == 0


def test_the_rewritten_model_runs_on_mcu(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_InPlace().eval(), (torch.zeros(1, 8),), name="in_place")
    rng = np.random.default_rng(0)
    # inputs in [-1, 1]: held-out samples stay inside the calibrated ranges (normal draws did not)
    calibration = [(rng.uniform(-1, 1, (1, 8)).astype(np.float32),) for _ in range(48)]
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    assert any(r["pass"] == "in-place-as-out-of-place" for r in art.manifest["rewrites"])
    assert art.manifest["verification"]["held_out"]["tflm_vs_float"]["sample_cosine"] >= 0.99


class _Returned(torch.nn.Module):
    """The written value is a graph output, read through the old name and the in-place result."""

    def forward(self, x):
        y = x * 2.0
        z = x + 1.0
        y.mul_(3.0)
        return y, z.add_(1.0)


def test_a_written_value_that_is_an_output_keeps_its_place():
    program = tpuedge.export(_Returned(), (torch.zeros(2, 4),), name="returned")
    ep, (result,) = PassManager([InPlaceAsOutOfPlace()]).run(program.exported_program)
    assert result.changed == 2
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got, want = Program(ep, name="returned").run(x), program.run(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class _SplitWrite(torch.nn.Module):
    """A chunk of split is a view of its input: writing it writes the input."""

    def forward(self, x):
        y = x * 2.0
        a, b = y.split(2, dim=1)
        a.mul_(3.0)
        return y


def test_a_write_into_a_split_chunk_is_left():
    program = tpuedge.export(_SplitWrite(), (torch.zeros(2, 4),), name="split_write")
    ep, (result,) = PassManager([InPlaceAsOutOfPlace()]).run(program.exported_program)
    assert result.changed == 0
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(Program(ep, name="split_write").run(x)[0], program.run(x)[0])


class _WriteIntoSoleView(torch.nn.Module):
    """HF Funnel's relative attention: `positional_attn *= cls_mask`, positional_attn a slice of
    a value (there a gather) nothing else reads: the write is seen only through that slice."""

    def forward(self, x, mask):
        scores = (x * 2.0 - 1.0)[:, 1:5]
        scores *= mask
        return scores + 1.0


def test_a_write_into_the_only_view_of_a_private_value_becomes_out_of_place():
    """Old code: the mul_ stayed (a view was written) and `check --target mcu` refused aten.mul_."""
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    mask = np.array([[1, 1, 0, 1], [0, 1, 1, 1]], np.float32)
    program = tpuedge.export(_WriteIntoSoleView(), (torch.from_numpy(x), torch.from_numpy(mask)), name="sole_view")
    ep, (result,) = PassManager([InPlaceAsOutOfPlace()]).run(program.exported_program)
    assert result.details["rewritten"] == {"mul.Tensor": 1}
    np.testing.assert_array_equal(Program(ep, name="sole_view").run(x, mask)[0], program.run(x, mask)[0])
    assert program.check("mcu") == []
