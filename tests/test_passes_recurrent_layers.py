"""nn.LSTM and nn.GRU layers unrolled over time on the IR, so sequence models build for mcu
(the zoo's digits_lstm and digits_gru were refused on aten.lstm.input / aten.gru.input): the
same numbers as torch in float, every direction, layer and state output; then TFLite-Micro."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes.recurrent_layers import UnrollRecurrentLayers
from tpuedge.shared_ir.program import Program


class _Seq(torch.nn.Module):
    def __init__(self, cell: str, layers: int, bidirectional: bool, batch_first: bool, with_state: bool, bias=True):
        super().__init__()
        kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(cell, torch.nn.RNN)
        options = {"nonlinearity": cell.removeprefix("rnn_")} if cell.startswith("rnn") else {}
        self.rnn = kind(
            6, 5, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias, **options
        )
        self.cell, self.with_state, self.batch_first = cell, with_state, batch_first
        self.states = layers * (2 if bidirectional else 1)

    def forward(self, x):
        if not self.with_state:
            out = self.rnn(x)
        else:
            batch = x.shape[0 if self.batch_first else 1]
            h0 = torch.full((self.states, batch, 5), 0.3)
            out = self.rnn(x, (h0, -h0) if self.cell == "lstm" else h0)
        output, state = out
        return (output, *state) if self.cell == "lstm" else (output, state)


CASES = [
    ("lstm", 1, False, True, False, True),
    ("lstm", 2, True, False, True, True),
    ("gru", 1, False, True, True, True),
    ("gru", 2, True, True, False, False),
    ("rnn_tanh", 2, True, True, True, True),
    ("rnn_relu", 1, False, False, False, True),
]


@pytest.mark.parametrize(
    "cell,layers,bidirectional,batch_first,with_state,bias",
    CASES,
    ids=[
        "lstm",
        "lstm-2layer-bidir-state",
        "gru-state",
        "gru-2layer-bidir-nobias",
        "rnn-tanh-2layer-bidir-state",
        "rnn-relu",
    ],
)
def test_unrolled_layer_gives_torchs_numbers(cell, layers, bidirectional, batch_first, with_state, bias):
    torch.manual_seed(0)
    module = _Seq(cell, layers, bidirectional, batch_first, with_state, bias).eval()
    shape = (2, 7, 6) if batch_first else (7, 2, 6)
    program = tpuedge.export(module, (torch.zeros(shape),), name=f"{cell}_seq")
    ep, result = UnrollRecurrentLayers()(program.exported_program)
    assert result.details["unrolled"] == {cell: 1}
    rewritten = Program(ep, name="unrolled")
    assert not [k for k in rewritten.op_histogram if k.startswith(("aten.lstm", "aten.gru", "aten.rnn"))]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for want, got in zip(program.run(x), rewritten.run(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _Keyword(torch.nn.Module):
    """A keyword-spotting head: GRU over 10 frames of 8 features, last state -> 4 classes."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(8, 12, batch_first=True)
        self.fc = torch.nn.Linear(12, 4)

    def forward(self, x):
        _, h = self.gru(x)
        return self.fc(h[-1])


@pytest.mark.slow
def test_a_gru_model_builds_for_mcu_and_meets_its_budget(tmp_path):
    """Old code: `aten.gru.input: mcu has no lowering for this op`."""
    torch.manual_seed(0)
    program = tpuedge.export(_Keyword().eval(), (torch.zeros(1, 10, 8),), name="keyword_gru")
    assert program.check("mcu") == []
    cal = [[x] for x in np.random.default_rng(0).standard_normal((40, 1, 10, 8)).astype(np.float32)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    assert artifact.manifest["accuracy_budget"]["met"]
    ops = {o["op"] for o in artifact.manifest["tflm_ops"]}
    assert "FULLY_CONNECTED" in ops and "LOGISTIC" in ops and "TANH" in ops


def test_the_input_projection_is_computed_once_per_direction_and_later_layers_need_no_stack():
    """An int8 FULLY_CONNECTED stores its bias as int32 on its input's scale, so a projection per
    step stored one bias copy per step (old code: 56 biased linears here; the zoo's 16-unit LSTM
    over 8 steps shipped 93 KB of TFLite-Micro model for 19.6k parameters, now 59 KB): the first
    layer projects its input once. A later layer read the stack of the previous layer's steps, a
    CONCATENATION of one input per step, which TFLite-Micro refuses beyond 10 (Resemblyzer's
    3-layer LSTM over 160 frames): it projects each step bias-free and adds the bias."""
    torch.manual_seed(0)
    module = _Seq("lstm", 2, True, False, True, True).eval()
    program = tpuedge.export(module, (torch.zeros(7, 2, 6),), name="lstm_seq")
    ep, _ = UnrollRecurrentLayers()(program.exported_program)
    linears = [n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default]
    biased = [n for n in linears if len(n.args) > 2 and n.args[2] is not None]
    assert len(biased) == 2  # layer 1's two directions: the input projections over all 7 steps
    assert len(linears) == 2 + 2 * 7 + 2 * 2 * 7  # layer 2's per step, and a bias-free recurrent one per step
    stacks = [n for n in ep.graph.nodes if n.target == torch.ops.aten.stack.default]
    # what the model returns: its output (one stack of 7 steps per direction) and h_n, c_n (4 states each)
    assert sorted(len(n.args[0]) for n in stacks) == [4, 4, 7, 7]
    assert not [u for n in stacks for u in n.users if u.target == torch.ops.aten.linear.default]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_zero_initial_state_leaves_no_recurrent_term_at_the_first_step(cell):
    """Without hx the state starts at zeros: old code multiplied them (a FULLY_CONNECTED of a
    zero constant, then an ADD and, for the LSTM, a MUL of zeros, per layer and direction)."""
    torch.manual_seed(0)
    module = _Seq(cell, 2, True, False, False, True).eval()
    program = tpuedge.export(module, (torch.zeros(7, 2, 6),), name=f"{cell}_seq")
    ep, _ = UnrollRecurrentLayers()(program.exported_program)
    linears = [n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default]
    assert len(linears) == 2 + 2 * 7 + 2 * 2 * 6  # the projections, and a recurrent one from the second step on
    assert not [n for n in ep.graph.nodes if n.target == torch.ops.aten.zeros.default and n.users]
    x = np.random.default_rng(2).standard_normal((7, 2, 6)).astype(np.float32)
    for want, got in zip(program.run(x), Program(ep, name="unrolled").run(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _Reader(torch.nn.Module):
    """An LSTM or GRU over 9 steps, its last output -> 3 classes."""

    def __init__(self, cell: str):
        super().__init__()
        self.rnn = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(6, 8, batch_first=True)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


@pytest.mark.slow
@pytest.mark.parametrize("cell,gates", [("gru", 3)])
def test_an_android_int8_recurrent_layer_stores_one_gate_bias_not_one_per_step(tmp_path, cell, gates):
    """Old code, 9 int32 gate-bias copies (one per step, each on its step's input scale) with
    their per-channel tables: the LSTM's from litert-torch's own unrolling (android did not
    unroll on the IR), the GRU's from its recurrent projection's b_hh. Now the input
    projection's one. (An LSTM is one fused op on android now, its biases float32 once:
    tests/test_sequence_lstm.py.)"""
    from tpuedge.edge.flatbuffer import tflite_file

    torch.manual_seed(0)
    program = tpuedge.export(_Reader(cell).eval(), (torch.zeros(1, 9, 6),), name=f"reader_{cell}")
    cal = [[x] for x in np.random.default_rng(0).standard_normal((32, 1, 9, 6)).astype(np.float32)]
    artifact = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=cal)
    assert artifact.manifest["accuracy_budget"]["met"]
    assert [r["pass"] for r in artifact.manifest["recipe"]["ir_rewrites"]] == [
        "unroll-recurrent-layers",
        "select-from-stack",
    ]
    model = tflite_file.read_model((tmp_path / "int8" / "model.tflite").read_bytes())
    gate_biases = [
        t
        for t in model.subgraphs[0].tensors
        if tflite_file.dtype_name(t.type) == "int32"
        and list(t.shape) == [gates * 8]
        and tflite_file.is_constant(model, t)
    ]
    assert len(gate_biases) == 1


class _Encoder(torch.nn.Module):
    """A speaker-encoder shape: a 2-layer LSTM over 12 frames, its last layer's final state."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.fc(h[-1])


@pytest.mark.slow
def test_a_two_layer_lstm_over_more_than_ten_steps_builds_for_mcu(tmp_path):
    """Old code: "TFLite-Micro's CONCATENATION kernel takes at most 10 inputs" (the second layer's
    input projection read the stack of the first layer's 12 steps)."""
    torch.manual_seed(0)
    program = tpuedge.export(_Encoder().eval(), (torch.zeros(1, 12, 6),), name="encoder")
    cal = [[x] for x in np.random.default_rng(0).standard_normal((40, 1, 12, 6)).astype(np.float32)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    assert artifact.manifest["accuracy_budget"]["met"]
    assert "CONCATENATION" not in {o["op"] for o in artifact.manifest["tflm_ops"]}
