"""LSTM layers on android as LiteRT's UNIDIRECTIONAL_SEQUENCE_LSTM, one op per layer and direction
(edge/litert/sequence_lstm.py): torch's numbers, the same answer on every invoke (the op's states outlive
one), and in a quantized build int8 weights where they cost little, measured. Old code wrote each
layer out over time: about 16 ops per step, 7,834 in Resemblyzer's int8 file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.litert.litert_runtime import LiteRTRunner
from tpuedge.edge.litert.fused_lstm_weights import plan_fused_lstm_weights, with_int8_weights
from tpuedge.edge.litert.sequence_lstm import FuseSequenceLSTM
from tpuedge.shared_ir.program import Program


class _Tagger(torch.nn.Module):
    def __init__(
        self, features=6, hidden=16, layers=2, bidirectional=True, batch_first=True, with_state=False, bias=True
    ):
        super().__init__()
        self.lstm = torch.nn.LSTM(
            features, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias
        )
        self.head = torch.nn.Linear(hidden * (2 if bidirectional else 1), 3)
        self.with_state, self.states, self.hidden = with_state, layers * (2 if bidirectional else 1), hidden

    def forward(self, x):
        if self.with_state:
            h0 = torch.full((self.states, x.shape[0], self.hidden), 0.3)
            out, (h, c) = self.lstm(x, (h0, -h0))
        else:
            out, (h, c) = self.lstm(x)
        return self.head(torch.relu(out)), h


class _ReadsCellState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[1][1]


def _ops(data: bytes) -> list[str]:
    model = tflite_file.read_model(data)
    names = tflite_file.operator_names(model)
    return [names[op.opcodeIndex] for op in model.subgraphs[0].operators]


@pytest.mark.parametrize(
    "batch_first,bidirectional,bias",
    [(True, True, True), (False, False, True), (True, False, False)],
    ids=["batch-first-bidir", "time-major", "no-bias"],
)
def test_the_fused_program_gives_torchs_numbers_in_torch(batch_first, bidirectional, bias):
    """The rewritten program (a clearing step, then the sequence) computes what the layer does,
    output and h_n, in torch: the reference a build's budget reads."""
    torch.manual_seed(0)
    shape = (2, 9, 6) if batch_first else (9, 2, 6)
    module = _Tagger(bidirectional=bidirectional, batch_first=batch_first, bias=bias).eval()
    program = tpuedge.export(module, (torch.zeros(shape),), name="tagger")
    ep, result = FuseSequenceLSTM()(program.exported_program)
    fused = Program(ep, name="fused")
    assert result.changed == 1 and "aten.lstm.input" not in fused.op_histogram
    assert fused.op_histogram["tpuedge.sequence_lstm.default"] == 2 * (2 if bidirectional else 1)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for want, got in zip(program.run(x), fused.run(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module", [_Tagger(with_state=True), _ReadsCellState()], ids=["given-state", "reads-c_n"])
def test_a_layer_the_fused_op_cannot_compute_is_left_for_the_unrolling(module):
    program = tpuedge.export(module.eval(), (torch.zeros(1, 5, 6),), name="kept")
    ep, result = FuseSequenceLSTM()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


@pytest.mark.parametrize(
    "options",
    [{"scheme": "dynamic-int8"}, {"scheme": "int8", "strict_int8": True}],
    ids=["dynamic-int8", "strict-int8"],
)
def test_a_scheme_asking_for_integer_compute_keeps_the_layer_for_the_unrolling(options):
    """The fused op computes in float: dynamic-int8's written-out layers run LiteRT's hybrid
    kernels (faster), --strict-int8 allows no float op."""
    from tpuedge.edge.android.android_convert import android_rewrites
    from tpuedge.quantize.config import QuantConfig

    program = tpuedge.export(_Tagger().eval(), (torch.zeros(1, 5, 6),), name="kept")
    assert android_rewrites(program, QuantConfig(**options)) == (program, [])
    assert android_rewrites(program, QuantConfig(scheme="int8"))[1][0]["pass"] == "fuse-sequence-lstm"


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "time-major"])
def test_an_android_float_lstm_is_one_op_per_layer_and_direction_and_answers_alike_on_every_invoke(
    tmp_path, batch_first
):
    """Old code: the layers written out over 12 steps (LOGISTIC, TANH, MUL, ... per step). The fused
    op keeps its states in variable tensors an invoke leaves behind: without the clearing step a
    second invoke on the same input answered differently (3e-4 on these 16 units)."""
    torch.manual_seed(0)
    shape = (2, 12, 6) if batch_first else (12, 2, 6)
    program = tpuedge.export(_Tagger(batch_first=batch_first).eval(), (torch.zeros(shape),), name="tagger")
    artifact = tpuedge.build(program, "android", tmp_path / "float", quantize="none")
    data = (tmp_path / "float" / "model.tflite").read_bytes()
    ops = _ops(data)
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 4 and "LOGISTIC" not in ops and len(ops) < 40, ops
    runner = LiteRTRunner(data)
    for x in np.random.default_rng(2).standard_normal((3, *shape)).astype(np.float32):
        want = program.run(x)
        for _ in range(3):  # the same input again: the same answer
            for w, g in zip(want, runner.run([x]), strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)
    assert artifact.manifest["accuracy_budget"]["met"]


class _Encoder(torch.nn.Module):
    """A speaker-encoder shape: a 2-layer LSTM over 50 frames of 40 features, its last state."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(40, 128, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(128, 64)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return torch.nn.functional.normalize(self.head(h[-1]), dim=-1)


@pytest.mark.slow
def test_an_int8_lstm_stores_int8_weights_within_the_size_goal(tmp_path):
    """Old code (the layers written out over 50 steps, about 1,600 ops): 1.3x the zoo's size goal
    (1.1x the parameter bytes + 32 KiB). Now its weights are int8, read through DEQUANTIZE into
    the float fused op, and the budget is met."""
    torch.manual_seed(0)
    module = _Encoder().eval()
    program = tpuedge.export(module, (torch.zeros(1, 50, 40),), name="encoder")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 50, 40)).astype(np.float32)] for _ in range(24)]
    artifact = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    data = (tmp_path / "int8" / "model.tflite").read_bytes()
    params = sum(p.numel() for p in module.parameters())
    assert len(data) <= 1.1 * params + 32 * 1024, (len(data), params)
    plan = artifact.manifest["recipe"]["fused_lstm_weights"]
    assert plan["int8"] == 16 and plan["float32"] == 0 and plan["score_vs_float_model"] >= 1 - plan["allowed_loss"]
    assert _ops(data).count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 2
    # the fused op and its clearing step compute in float from the start, and the manifest says so
    [fused] = [o for o in artifact.manifest["recipe"]["non_int8_ops"] if o["kind"] == "fused_recurrent"]
    assert fused["precision"] == "float" and any(op.startswith("UNIDIRECTIONAL_SEQUENCE_LSTM") for op in fused["ops"])
    assert artifact.manifest["accuracy_budget"]["met"] and artifact.manifest["accuracy"]["cosine"] >= 0.995


class _Stretched(torch.nn.Module):
    """An LSTM whose first input weights see features on very different scales (a power
    spectrogram's): one input column's weights 500x the rest, so int8 per output channel rounds
    the others away."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        with torch.no_grad():
            self.lstm.weight_ih_l0[:, 0] *= 500
            self.lstm.weight_ih_l0[:, 1:] *= 3

    def forward(self, x):
        return self.lstm(x)[0][:, -1]


def test_the_plan_keeps_float32_the_weights_whose_int8_costs_too_much():
    """All int8, the stretched layer misses the allowed loss; the plan keeps float32 the input
    weights that cost it (measured one by one), and what it applies scores as it says."""
    torch.manual_seed(0)
    program = tpuedge.export(_Stretched().eval(), (torch.zeros(1, 10, 8),), name="stretched")
    float_model, _ = _float_model(program)
    rng = np.random.default_rng(0)
    samples = [
        [
            np.concatenate([rng.standard_normal((1, 10, 1)) * 1e-3, rng.standard_normal((1, 10, 7))], -1).astype(
                np.float32
            )
        ]
        for _ in range(8)
    ]
    every_int8 = plan_fused_lstm_weights(float_model, samples, 1.0)
    assert every_int8.float32 == frozenset() and len(every_int8.names) == 8
    plan = plan_fused_lstm_weights(float_model, samples, 1e-4)
    assert every_int8.score < 1 - 1e-4 <= plan.score
    assert plan.float32 and all(input_index in (1, 2, 3, 4) for _, input_index in plan.float32)  # input-to-gate weights
    stored = with_int8_weights(float_model, plan.float32)
    assert _ops(stored).count("DEQUANTIZE") == 8 - len(plan.float32)


def _float_model(program):
    from tpuedge.edge.android.android_convert import android_rewrites
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.quantize.config import QuantConfig

    fused, rewrites = android_rewrites(program, QuantConfig(scheme="none"))
    return float_tflite(fused, target="android"), rewrites
