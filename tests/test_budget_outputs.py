"""The outputs an accuracy budget holds (--budget-outputs) and stateful models judged as they run
(--rollout): every step of each sequence measured, each model fed the state it wrote itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_cli

from tpuedge.quantize.budget import AccuracyBudget, check_budget
from tpuedge.quantize.rollout import parse_rollout, rollout_runs
from tpuedge.shared_ir.errors import UserError

LEAKY_MODEL = '''
import torch
from torch import nn


class Leaky(nn.Module):
    """A streaming cell: h leaks and takes a little of each step's input; the scores read h."""

    def __init__(self):
        super().__init__()
        self.fc_in = nn.Linear(8, 16)
        self.fc_out = nn.Linear(16, 32)

    def forward(self, x, h):
        h = 0.9 * h + 0.1 * torch.tanh(self.fc_in(x))
        return {"scores": self.fc_out(h), "h_out": h}


def build():
    torch.manual_seed(0)
    return Leaky().eval(), (torch.zeros(1, 8), torch.zeros(1, 16))
'''


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    work = tmp_path_factory.mktemp("leaky")
    (work / "leaky.py").write_text(LEAKY_MODEL)
    from tpuedge.shared_ir.model_spec import load_program

    return work, load_program(f"{work / 'leaky.py'}:build")


def test_budget_outputs_hold_only_the_named_outputs(leaky):
    _, program = leaky
    assert program.output_names == ["scores", "h_out"] and program.input_names == ["x", "h"]
    rng = np.random.default_rng(0)
    reference = [[rng.standard_normal((1, 32)), rng.standard_normal((1, 16))] for _ in range(10)]
    candidate = [[s + 0.01 * rng.standard_normal((1, 32)), -h] for s, h in reference]  # h_out is ruined

    default = AccuracyBudget.from_options(program=program)
    assert default.top1_outputs == (0,) and default.cosine_outputs is None
    assert [f.split(":")[0] for f in check_budget(default, reference, candidate, inputs="x").failures] == [
        "output 1 (h_out)"
    ]
    named = AccuracyBudget.from_options(program=program, budget_outputs="scores")
    result = check_budget(named, reference, candidate, inputs="x")
    assert result.passed and result.sample_cosine[1] < 0  # measured and reported, not held
    assert named.to_json()["cosine_outputs"] == ["output 0 (scores)"]
    argmax_only = AccuracyBudget.from_options(program=program, budget_outputs="scores:top1, h_out:top1")
    assert argmax_only.cosine_outputs == () and argmax_only.top1_outputs == (0, 1)
    assert check_budget(argmax_only, reference, candidate, inputs="x").failures[0].startswith("output 1 (h_out): top-1")
    # a probability judged by the decision taken from it: the side of 0.5
    decision = AccuracyBudget.from_options(program=program, budget_outputs="h_out:decision", min_top1=0.8)
    probs = [[s, np.full((1, 16), 0.6)] for s, _ in reference]
    near = [[s, np.where(np.arange(16) < 2, 0.4, 0.55)[None]] for s, _ in reference]  # 2 of 16 cross 0.5
    result = check_budget(decision, probs, near, inputs="x")
    assert result.top1[1] == 0.875 and result.passed and decision.cosine_outputs == ()
    assert not check_budget(
        AccuracyBudget.from_options(program=program, budget_outputs="h_out:decision"), probs, near, inputs="x"
    ).passed  # 87.5% < the default 99%
    with pytest.raises(UserError, match="has no output 'logits'.*Its outputs: scores, h_out"):
        AccuracyBudget.from_options(program=program, budget_outputs="logits")
    with pytest.raises(UserError, match="'mse' is no metric"):
        AccuracyBudget.from_options(program=program, budget_outputs="scores:mse")


def test_rollout_feeds_each_model_the_state_it_wrote():
    """Sequences are read in order, `steps` samples each; the first step's state starts it."""

    class Spec:  # what parse_rollout reads of a Program
        name, output_names, input_names = "acc", ["y", "s_out"], ["x", "s"]
        outputs = [type("T", (), {"shape": (1, 1)})(), type("T", (), {"shape": (1, 2)})()]
        inputs = [type("T", (), {"shape": (1, 1)})(), type("T", (), {"shape": (1, 2)})()]

    rollout = parse_rollout("s_out=s:3", Spec(), samples=7)
    assert rollout.pairs == ((1, 1),) and rollout.steps == 3 and rollout.sequences(7) == 2

    def accumulate(inputs):  # s' = s + x, y = s'[0]
        x, s = inputs
        state = s + x
        return [state[:, :1], state]

    samples = [(np.full((1, 1), k, np.float32), np.full((1, 2), 100.0 * k, np.float32)) for k in range(7)]
    ys = [float(o[0][0, 0]) for o in rollout_runs(rollout, samples, accumulate)]
    assert ys == [0.0, 1.0, 3.0, 300.0 + 3, 300.0 + 3 + 4, 300.0 + 3 + 4 + 5]  # the 7th sample: no whole sequence
    for bad, why in (
        ("s_out=s", "no ':STEPS'"),
        ("s_out=s:0", "1 or more"),
        ("y=s:2", "must keep its shape"),
        ("s_out=q:2", "no input 'q'"),
        ("s_out=s:8", "fewer than one sequence"),
    ):
        with pytest.raises(UserError, match=why):
            parse_rollout(bad, Spec(), samples=7)


def test_rollout_build_measures_every_step_and_says_so(leaky, tmp_path):
    work, program = leaky
    rng = np.random.default_rng(1)
    steps, sequences = 8, 3
    x = rng.standard_normal((steps * sequences, 1, 8)).astype(np.float32)
    h = np.zeros((steps * sequences, 1, 16), np.float32)
    np.savez(tmp_path / "eval.npz", x=x, h=h)
    np.savez(
        tmp_path / "cal.npz",
        x=rng.standard_normal((32, 1, 8)).astype(np.float32),
        h=(0.3 * rng.standard_normal((32, 1, 16))).astype(np.float32),
    )
    common = ("build", f"{work / 'leaky.py'}:build", "--no-cache", "--eval", str(tmp_path / "eval.npz"))

    code, stdout, err = run_cli(
        *common,
        "--target",
        "android",
        "--quantize",
        "none",
        "--budget-outputs",
        "scores",
        "--rollout",
        "h_out=h:8",
        "--out",
        str(tmp_path / "f"),
    )
    assert code == 0, (stdout, err)
    entry = json.loads((tmp_path / "f" / "manifest.json").read_text())["accuracy_budget"]
    assert (
        entry["met"] and entry["samples"] == steps * sequences and entry["rollout"] == {"spec": "h_out=h:8", "steps": 8}
    )
    assert entry["inputs"] == "eval data: 3 sequence(s) of 8 steps, state fed back (h_out=h:8)"
    assert (
        entry["cosine_outputs"] == ["output 0 (scores)"] and entry["measured"]["sample_cosine_per_output"][0] > 0.9999
    )

    # --quantize auto measures every candidate the same way
    code, stdout, err = run_cli(
        *common,
        "--target",
        "android",
        "--quantize",
        "auto",
        "--budget-outputs",
        "scores",
        "--rollout",
        "h_out=h:8",
        "--out",
        str(tmp_path / "auto"),
    )
    assert code == 0, (stdout, err)
    manifest = json.loads((tmp_path / "auto" / "manifest.json").read_text())
    assert (
        manifest["recipe"]["auto"]["samples"] == steps * sequences
        and "3 sequence(s) of 8 steps" in manifest["accuracy_budget"]["inputs"]
    )

    code, stdout, err = run_cli(
        *common,
        "--target",
        "mcu",
        "--calibration",
        str(tmp_path / "cal.npz"),
        "--rollout",
        "h_out=h:8",
        "--budget-outputs",
        "scores",
        "--allow-below-budget",
        "--out",
        str(tmp_path / "m"),
    )
    assert code == 0, (stdout, err)
    entry = json.loads((tmp_path / "m" / "manifest.json").read_text())["accuracy_budget"]
    assert entry["samples"] == steps * sequences and "3 sequence(s) of 8 steps" in entry["inputs"]
    assert 0.9 < entry["measured"]["sample_cosine_per_output"][0] <= 1.0

    code, _, err = run_cli(
        *common, "--target", "android", "--quantize", "none", "--rollout", "h_out=x:8", "--out", str(tmp_path / "bad")
    )
    assert code == 2 and "a state fed back must keep its shape" in err and not (tmp_path / "bad").exists()
