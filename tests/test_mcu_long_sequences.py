"""`tpuedge check --target mcu` says what a recurrent layer over a long sequence costs the build
(edge/mcu/mcu_capability.py): unrolled, one cell per step and layer in one graph."""

from __future__ import annotations

import torch

import tpuedge
from tpuedge.edge.mcu.mcu_capability import LONG_RECURRENCE_STEPS


class _ConvLstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)
        self.lstm = torch.nn.LSTM(8, 8, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):  # [1, frames, 8]
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        return self.head(self.lstm(y)[0]).squeeze(-1)


def _notes(frames: int) -> list[str]:
    torch.manual_seed(0)
    program = tpuedge.export(_ConvLstm().eval(), (torch.zeros(1, frames, 8),), name=f"conv_lstm_{frames}")
    return [n for n in program.rewrites("mcu") if n.startswith("nn.LSTM over")]


def test_check_names_the_cells_of_a_long_recurrence_and_the_streaming_form():
    (note,) = _notes(LONG_RECURRENCE_STEPS + 36)
    assert note.startswith("nn.LSTM over 100 steps becomes 200 cells") and "--rollout" in note


def test_a_short_recurrence_gets_no_such_note():
    assert _notes(12) == []


class _LastState(_ConvLstm):
    def forward(self, x):
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        return self.head(self.lstm(y)[1][0][-1])


def test_check_refuses_the_stack_of_every_step_tflite_micro_cannot_concatenate():
    """TFLite-Micro's CONCATENATION takes at most 10 inputs (op data: max_inputs); the unrolled
    output sequence over 20 steps stacks 20. The build met it in the arena probe, after the
    whole conversion and int8 search; the check names it, with the model's line."""
    torch.manual_seed(0)
    program = tpuedge.export(_ConvLstm().eval(), (torch.zeros(1, 20, 8),), name="conv_lstm_20")
    (problem,) = program.check("mcu")
    assert (problem.kind, problem.subject) == ("inputs", "aten.stack.default")
    assert "at most 10 input tensors" in problem.message and "reads 20" in problem.message
    assert "streaming step" in problem.suggestion and any("forward" in s for s in problem.sources)
    last = tpuedge.export(_LastState().eval(), (torch.zeros(1, 20, 8),), name="conv_lstm_last")
    assert last.check("mcu") == []  # only the last state read: no stack
