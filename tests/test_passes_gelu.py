"""The GELU rewrite pass and the pass manager on the shared IR."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.gelu_rewrite import GeluRewrite
from tpuedge.shared_ir.program import Program


class _Gelus(torch.nn.Module):
    def forward(self, x):
        return F.gelu(x) + F.gelu(2 * x, approximate="tanh")


@pytest.fixture(scope="module")
def gelu_program():
    return tpuedge.export(_Gelus(), (torch.zeros(4, 256),), name="gelus")


@pytest.mark.parametrize("form, bound", [("sigmoid", 0.03), ("tanh", 1e-3)])
def test_rewrite_replaces_every_gelu_within_its_error(gelu_program, form, bound):
    before = dict(gelu_program.op_histogram)
    ep, result = GeluRewrite(form)(gelu_program.exported_program)
    rewritten = Program(ep, name="gelus")
    assert result.changed == 2
    assert "aten.gelu.default" not in rewritten.op_histogram
    assert gelu_program.op_histogram == before  # the input program is untouched
    x = np.linspace(-6, 6, 1024, dtype=np.float32).reshape(4, 256)
    exact = gelu_program.run(x)[0]
    approx = rewritten.run(x)[0]
    err = np.abs(exact - approx).max()
    # x*sigmoid(1.702x) is ~0.02 off exact GELU at worst; the tanh form ~1e-4 (twice: 2 GELUs summed)
    assert 0 < err <= bound


def test_pass_manager_runs_in_order_and_is_a_noop_without_gelu():
    prog = tpuedge.export(torch.nn.ReLU(), (torch.zeros(2, 3),), name="relu")
    ep, results = PassManager([GeluRewrite("sigmoid"), GeluRewrite("tanh")]).run(prog.exported_program)
    assert [r.name for r in results] == ["gelu-to-sigmoid", "gelu-to-tanh"]
    assert [r.changed for r in results] == [0, 0]
    assert ep is prog.exported_program


def test_unknown_form_is_a_user_error():
    with pytest.raises(tpuedge.UserError, match="sigmoid, tanh"):
        GeluRewrite("erf")


def test_mcu_check_sees_the_rewritten_program(gelu_program):
    assert gelu_program.check("mcu") == []  # GELU is rewritten the same way the build does


class _WrittenOutGelu(torch.nn.Module):
    """GPT-2's `gelu_new` (ALBERT's default activation), ops instead of F.gelu."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        x = self.linear(x)
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


def test_written_out_tanh_gelu_keeps_its_function():
    from tpuedge.shared_ir.passes.gelu_rewrite import TanhGeluArrangement
    from tpuedge.shared_ir.passes.powers import PowersAsProducts

    torch.manual_seed(0)
    program = tpuedge.export(_WrittenOutGelu().eval(), (torch.zeros(4, 16),), name="gelu_new")
    ep, results = PassManager([PowersAsProducts(), TanhGeluArrangement()]).run(program.exported_program)
    assert results[1].changed == 1
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32) * 3
    np.testing.assert_allclose(Program(ep, name="arranged").run(x)[0], program.run(x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model, gelu", [("written out", "sigmoid"), ("F.gelu", "tanh")])
def test_tanh_gelus_build_for_mcu_as_tanh_not_as_a_gelu_op(tmp_path, model, gelu):
    """The converter fused both back into one GELU op (no TFLite-Micro kernel): `--gelu tanh`
    and GPT-2-style models were refused by the mcu build."""

    class _FGelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x):
            return F.gelu(self.linear(x))

    torch.manual_seed(0)
    module = _WrittenOutGelu() if model == "written out" else _FGelu()
    program = tpuedge.export(module.eval(), (torch.zeros(4, 16),), name="gelu")
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal((32, 4, 16)).astype(np.float32))
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=str(tmp_path / "cal.npz"), gelu=gelu)
    ops = {o["op"] for o in art.manifest["tflm_ops"]}
    assert "TANH" in ops and "GELU" not in ops
    assert art.manifest["accuracy_budget"]["met"]
