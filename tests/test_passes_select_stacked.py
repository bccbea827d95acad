"""A step read from an unrolled recurrent layer's output (`out[:, -1]`) is read from that step,
not from the stack of all steps: same numbers, no stack left, and the int8 model loses its
CONCATENATION and the requantizing QUANTIZE of every step (7 of them in a GRU over 8 steps)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.shared_ir.passes.recurrent_layers import UnrollRecurrentLayers
from tpuedge.shared_ir.passes.select_stacked import SelectFromStack
from tpuedge.shared_ir.program import Program


class _LastStep(torch.nn.Module):
    def __init__(self, cell: str, bidirectional: bool = False, layers: int = 1):
        super().__init__()
        kind = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
        self.rnn = kind(8, 16, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        self.head = torch.nn.Linear(16 * (2 if bidirectional else 1), 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class _Picks(torch.nn.Module):
    """Picks from a user's own stack and cat, on the joined axis and across it."""

    def forward(self, a, b):
        s = torch.stack([a, b, a * 2], 1)  # (2, 3, 5)
        c = torch.cat([a, b], 1)  # (2, 10)
        both = torch.cat([torch.stack([a, b], 0), torch.stack([b, a], 0)], 2)  # (2, 2, 10)
        return s[:, -1], s[:, 1], c[:, 7], both[1]


def _stacks(program) -> int:
    return sum(n for op, n in program.op_histogram.items() if op.startswith("aten.stack"))


@pytest.mark.parametrize(
    "cell,bidirectional,layers", [("gru", False, 1), ("lstm", True, 2)], ids=["gru", "lstm-2layer-bidir"]
)
def test_the_last_step_is_read_from_that_step(cell, bidirectional, layers):
    torch.manual_seed(0)
    program = tpuedge.export(_LastStep(cell, bidirectional, layers).eval(), (torch.zeros(2, 8, 8),), name="last")
    unrolled = Program(UnrollRecurrentLayers()(program.exported_program)[0], name="unrolled")
    ep, result = SelectFromStack()(unrolled.exported_program)
    picked = Program(ep, name="picked")
    assert result.changed and _stacks(unrolled) > 0
    # layer 2 reads layer 1 step by step (recurrent_layers.py), and the last layer's stacks go:
    # none is left, and no select reads a stack or cat any more
    assert _stacks(picked) == 0, picked.op_histogram
    assert not [
        n
        for n in ep.graph.nodes
        if n.op == "call_function"
        and n.target is torch.ops.aten.select.int
        and getattr(n.args[0], "target", None) in (torch.ops.aten.stack.default, torch.ops.aten.cat.default)
    ]
    x = np.random.default_rng(1).standard_normal((2, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(picked.run(x)[0], program.run(x)[0], rtol=1e-5, atol=1e-6)


def test_picks_from_a_users_own_stack_and_cat_keep_their_values():
    program = tpuedge.export(_Picks(), (torch.zeros(2, 5), torch.zeros(2, 5)), name="picks")
    ep, result = SelectFromStack()(program.exported_program)
    picked = Program(ep, name="picked")
    assert result.changed >= 4
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 2, 5)).astype(np.float32)
    for want, got in zip(program.run(a, b), picked.run(a, b), strict=True):
        np.testing.assert_array_equal(got, want)


def test_an_int8_gru_classifier_stacks_nothing(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_LastStep("gru").eval(), (torch.zeros(1, 8, 8),), name="gru_last")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 8, 8)).astype(np.float32)] for _ in range(16)]
    for target, options in (("mcu", {"board": "esp32s3"}), ("android", {"quantize": "int8"})):
        tpuedge.build(program, target, tmp_path / target, calibration=calibration, **options)
        model = tflite_file.read_model((tmp_path / target / "model.tflite").read_bytes())
        ops = [tflite_file.operator_names(model)[op.opcodeIndex] for op in model.subgraphs[0].operators]
        assert "CONCATENATION" not in ops and "PACK" not in ops, (target, sorted(set(ops)))
        assert ops.count("QUANTIZE") <= (0 if target == "mcu" else 1), (
            target,
            ops.count("QUANTIZE"),
        )  # android: float input
