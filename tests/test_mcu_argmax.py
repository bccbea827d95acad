"""argmax / argmin and order comparisons on mcu: TFLite-Micro's int8 ARG_MAX, ARG_MIN, LESS, ...
read the integer tensors the quantizer dequantized for them (edge/mcu/tflm_forms.py), so a graph that
picks a token and feeds it back (a greedy decode inside `forward`) or masks by a threshold builds;
where a greedy decoder misses its accuracy budget, the refusal says why (quantize/fed_back_choices.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize.fed_back_choices import fed_back_choices_note


class _PickAndFeedBack(torch.nn.Module):
    """Two tokens chosen from the input (argmax and argmin), looked up and fed to the head."""

    def __init__(self):
        super().__init__()
        self.scores = torch.nn.Linear(8, 6)
        self.emb = torch.nn.Embedding(6, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        s = self.scores(x)
        return self.head(torch.relu(x + self.emb(s.argmax(-1)) - self.emb(s.argmin(-1))))


class _GreedyDecoder(torch.nn.Module):
    def __init__(self, steps=3):
        super().__init__()
        self.emb = torch.nn.Embedding(6, 8)
        self.cell = torch.nn.GRUCell(8, 8)
        self.out = torch.nn.Linear(8, 6)
        self.steps = steps

    def forward(self, h):
        tok, outs = torch.zeros(h.shape[0], dtype=torch.long), []
        for _ in range(self.steps):
            h = self.cell(self.emb(tok), h)
            logits = self.out(h)
            tok = logits.argmax(-1)
            outs.append(logits)
        return torch.stack(outs, 1)


def _samples(n=32):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((1, 8)).astype(np.float32),) for _ in range(n)]


def test_mcu_builds_argmax_and_argmin_in_int8(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_PickAndFeedBack().eval(), (torch.zeros(1, 8),), name="pick")
    assert program.check("mcu") == []  # was: "aten.argmax.default: mcu has no lowering for this op"
    cal = _samples()
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal, strict_int8=True)
    ops = {o["op"] for o in art.manifest["tflm_ops"]}
    assert {"ARG_MAX", "ARG_MIN"} <= ops and "DEQUANTIZE" not in ops
    assert art.manifest["quantization"]["recipe"]["tflm_forms"]["integer_arg_extremes"] == 2
    # TFLite-Micro picks the float model's rows: a different pick moves the output by a whole embedding row
    worst = max(np.abs(art.run(x)[0] - program.run(x)[0]).max() for (x,) in cal[:12])
    assert worst < 0.05, worst


def test_the_note_names_argmax_fed_back_and_only_then():
    decoder = tpuedge.export(_GreedyDecoder(steps=3).eval(), (torch.zeros(1, 8),), name="greedy")
    note = fed_back_choices_note(decoder.exported_program)
    # the last step's argmax reads nothing after it (torch.export drops it): two are fed back
    assert note is not None and "2 argmax/argmin choice(s)" in note and "test_mcu_argmax.py" in note
    assert "static int8 and dynamic int8 both miss" in note and "Decode on the host" in note

    class _Classifier(torch.nn.Module):
        def forward(self, x):
            return x * 2.0, x.argmax(-1)  # an argmax that is only an output compounds nothing

    classifier = tpuedge.export(_Classifier(), (torch.zeros(1, 8),), name="classifier")
    assert fed_back_choices_note(classifier.exported_program) is None


def test_a_greedy_decoder_below_its_budget_is_told_why(tmp_path):
    from tpuedge.shared_ir.errors import BudgetError

    torch.manual_seed(0)
    program = tpuedge.export(_PickAndFeedBack().eval(), (torch.zeros(1, 8),), name="pick")
    with pytest.raises(BudgetError, match=r"(?s)misses its accuracy budget.*2 argmax/argmin choice\(s\) back"):
        tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(), strict_int8=True, min_cosine=0.99999)
    assert not (tmp_path / "mcu").exists()


class _Masks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return (y > 0.3).float(), (x <= y).float(), y  # y compared and returned: its output stays int8


def test_mcu_builds_comparisons_in_int8_with_the_int8_values_own_answers(tmp_path):
    from tpuedge.quantize import affine

    torch.manual_seed(0)
    program = tpuedge.export(_Masks().eval(), (torch.zeros(1, 8),), name="masks")
    assert program.check("mcu") == []  # was: "aten.gt.Scalar: mcu has no lowering for this op"
    cal = _samples()
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal, strict_int8=True, allow_below_budget=True)
    assert {"GREATER", "LESS_EQUAL"} <= {o["op"] for o in art.manifest["tflm_ops"]}
    assert art.manifest["quantization"]["recipe"]["tflm_forms"]["integer_comparisons"] == 2
    io = art.manifest["quantization"]["io"]
    assert [o["dtype"] for o in io["outputs"]] == ["int8"] * 3
    x_in = io["inputs"][0]
    decided = 0
    for (x,) in cal:
        over, below, y = art.run(x)
        xq = affine.dequantize(
            affine.quantize(x, x_in["scale"], x_in["zero_point"], "int8", ties="away"),
            x_in["scale"],
            x_in["zero_point"],
        )
        # each mask is the comparison of the int8 values TFLite-Micro holds, the constant exact
        np.testing.assert_array_equal(over > 0.5, y > 0.3)
        np.testing.assert_array_equal(below > 0.5, xq <= y)
        decided += int((over > 0.5).sum() + (below > 0.5).sum())
    assert 0 < decided < 2 * 8 * len(cal)  # both answers occur
