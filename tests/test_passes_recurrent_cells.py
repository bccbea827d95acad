"""nn.LSTMCell, nn.GRUCell and nn.RNNCell on the IR: decomposed into ops with int8 TFLite-Micro
kernels, exact in float, and small stateful models build for mcu and run in TFLite-Micro close
to the float IR."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes.recurrent_cells import DecomposeRecurrentCells
from tpuedge.shared_ir.program import Program


class _Stateful(torch.nn.Module):
    """One LSTM step: (x, h, c) -> (class scores, h', c'), as a streaming model runs on a device."""

    def __init__(self, bias: bool = True):
        super().__init__()
        self.cell = torch.nn.LSTMCell(8, 16, bias=bias)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, h, c):
        h, c = self.cell(x, (h, c))
        return self.head(h), h, c


def _program(bias=True):
    torch.manual_seed(0)
    example = (torch.zeros(1, 8), torch.zeros(1, 16), torch.zeros(1, 16))
    return tpuedge.export(_Stateful(bias).eval(), example, name="lstm_step")


def _samples(n, seed):
    """Inputs and the states a real run reaches (fed back from the float model)."""
    program = _program()
    rng = np.random.default_rng(seed)
    h, c, out = np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32), []
    for _ in range(n):
        x = rng.standard_normal((1, 8)).astype(np.float32)
        out.append((x, h, c))
        _, h, c = program.run(x, h, c)
    return out


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_decomposes_exactly(bias):
    program = _program(bias)
    ep, result = DecomposeRecurrentCells()(program.exported_program)
    rewritten = Program(ep, name="lstm_step")
    assert result.changed == 1
    hist = rewritten.op_histogram
    assert "aten.lstm_cell.default" not in hist
    assert set(hist) <= {
        "aten.linear.default",
        "aten.add.Tensor",
        "aten.slice.Tensor",
        "aten.sigmoid.default",
        "aten.tanh.default",
        "aten.mul.Tensor",
    }
    for sample in _samples(8, seed=1):
        for a, b in zip(program.run(*sample), rewritten.run(*sample)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_lstm_cell_model_builds_for_mcu_and_runs_in_tflm(tmp_path):
    program = _program()
    assert program.check("mcu") == []
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(64, seed=0), eval="none")
    m = art.manifest
    ops = {o["op"] for o in m["tflm_ops"]}
    assert {"FULLY_CONNECTED", "LOGISTIC", "TANH", "MUL", "ADD"} <= ops
    assert [r["pass"] for r in m["rewrites"]] == ["decompose-recurrent-cells"]
    assert m["rewrites"][0]["accuracy_cost_vs_original_float"]["max_abs_error"] < 1e-5  # exact in float
    check = m["verification"]["held_out"]  # measured in the TFLite-Micro interpreter vs the float IR
    assert check["tflm_vs_litert_max_lsb"] <= 1
    assert check["tflm_vs_float"]["cosine"] > 0.99, check["tflm_vs_float"]


class _StatefulGRU(torch.nn.Module):
    """A streaming GRU step and a plain RNN step: (x, h) -> (class scores, h')."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRUCell(8, 16)
        self.rnn = torch.nn.RNNCell(16, 16, nonlinearity="tanh")
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, h):
        h = self.rnn(self.gru(x, h), h)
        return self.head(h), h


def test_gru_and_rnn_cells_decompose_exactly_and_build_for_mcu(tmp_path):
    """Old code: `check --target mcu` refused aten.gru_cell and aten.rnn_tanh_cell."""
    torch.manual_seed(0)
    program = tpuedge.export(_StatefulGRU().eval(), (torch.zeros(1, 8), torch.zeros(1, 16)), name="gru_step")
    ep, result = DecomposeRecurrentCells()(program.exported_program)
    assert result.details["decomposed"] == {"gru": 1, "tanh": 1}
    rng = np.random.default_rng(0)
    h, samples = np.zeros((1, 16), np.float32), []
    for _ in range(48):  # the states a real run reaches, fed back from the float model
        x = rng.standard_normal((1, 8)).astype(np.float32)
        samples.append((x, h))
        for a, b in zip(program.run(x, h), Program(ep, name="gru_step").run(x, h)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        _, h = program.run(x, h)
    assert program.check("mcu") == []
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=samples, eval="none")
    assert art.manifest["verification"]["held_out"]["tflm_vs_float"]["cosine"] > 0.99
