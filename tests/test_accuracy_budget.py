"""The accuracy budget is the build contract for android and mcu (issue 9.1).

Real builds (litert-torch, ai-edge-quantizer, LiteRT, TFLite-Micro). The planted-outlier MLP is
what per-tensor int8 breaks: one input feature ~300x the others sets the input's scale and
crushes the rest. Before the budget, that build exited 0 and wrote the broken model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run_cli

import tpuedge
from tpuedge.shared_ir.errors import BudgetError, UserError

OUTLIER_MODEL = '''
import torch
from torch import nn


class Outlier(nn.Module):
    """Input feature 0 arrives ~300x the others (a sensor in other units; fc1 scales it back):
    the int8 input has one scale, and keeps only that feature. No layer comes before the input,
    so no rescaling between layers (cross-layer equalization) can move it. fc1 is wide: its
    32,768 weights are over what the android search may keep in float32 (about 12,800 here)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 2048)
        self.fc2 = nn.Linear(2048, 10)
        with torch.no_grad():
            self.fc1.weight[:, 0] /= 300.0

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def build():
    torch.manual_seed(0)
    return Outlier().eval(), (torch.zeros(1, 16),)
'''


def outlier_inputs(count: int = 64) -> np.ndarray:
    """Inputs for OUTLIER_MODEL: standard normal, feature 0 times 300."""
    x = np.random.default_rng(0).standard_normal((count, 16)).astype(np.float32)
    x[:, 0] *= 300.0
    return x


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    """(work dir with outlier.py and cal.npy, the Program, calibration array)."""
    work = tmp_path_factory.mktemp("budget")
    (work / "outlier.py").write_text(OUTLIER_MODEL)
    cal = outlier_inputs()
    np.save(work / "cal.npy", cal)
    from tpuedge.model_spec import load_program

    return work, load_program(f"{work / 'outlier.py'}:build"), cal


def _tree(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_below_budget_exits_1_prints_the_recipes_and_leaves_the_folder(outlier):
    """Old code: exit 0 and a model with cosine ~0.3 written over the folder."""
    work, _, _ = outlier
    out = work / "android_out"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"the user's previous model")
    (out / "notes.txt").write_text("keep me")
    before = _tree(out)
    code, stdout, err = run_cli(
        "build", f"{work / 'outlier.py'}:build", "--target", "android", "--quantize", "int8", "--no-per-channel",
        "--calibration", str(work / "cal.npy"), "--out", str(out), "--no-cache",
    )
    assert code == 1, (stdout, err)
    assert "misses its accuracy budget" in err and "mean per-sample cosine" in err
    assert "Recipes tried" in err and "all int8" in err  # the table, with the measured numbers
    assert "held out from calibration" in err or "calibration samples" in err  # which samples it was measured on
    assert "--allow-below-budget" in err
    assert _tree(out) == before  # nothing written, nothing clobbered
    assert {p.name for p in work.iterdir()} - {"__pycache__"} == {"android_out", "cal.npy", "outlier.py"}  # no staging left


def test_allow_below_budget_writes_and_says_so(outlier, tmp_path):
    _, program, cal = outlier
    art = tpuedge.build(program, "android", tmp_path / "a", quantize="int8", per_channel=False, calibration=cal,
                        allow_below_budget=True)
    entry = json.loads((tmp_path / "a" / "manifest.json").read_text())["accuracy_budget"]
    assert entry["met"] is False and entry["written_below_budget"] is True
    assert entry["min_cosine"] == 0.99 and entry["measured"]["sample_cosine_per_output"][0] < 0.99  # 0.97 with every op int16
    assert "BELOW ACCURACY BUDGET" in art.report()


def test_mcu_below_budget_raises_and_config_file_can_allow_it(outlier, monkeypatch):
    """mcu too, and the options work from [tool.tpuedge.mcu] in pyproject.toml."""
    work, program, cal = outlier
    with pytest.raises(BudgetError, match="mcu build misses its accuracy budget"):
        tpuedge.build(program, "mcu", work / "mcu_py", calibration=cal)
    assert not (work / "mcu_py").exists()
    proj = work / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text("[tool.tpuedge.mcu]\nallow_below_budget = true\nmin_cosine = 0.995\n")
    monkeypatch.chdir(proj)
    code, stdout, err = run_cli(
        "build", f"{work / 'outlier.py'}:build", "--target", "mcu", "--calibration", str(work / "cal.npy"), "--out", "out",
    )
    assert code == 0, err
    entry = json.loads((proj / "out" / "manifest.json").read_text())["accuracy_budget"]
    assert entry["written_below_budget"] is True and entry["min_cosine"] == 0.995
    assert "BELOW ACCURACY BUDGET" in stdout


def test_max_drop_checks_task_accuracy_on_labelled_eval_data(outlier, tmp_path):
    _, program, cal = outlier
    labels = np.argmax(np.concatenate([program.run(x[None])[0] for x in cal]), axis=-1)  # float accuracy 100%
    with pytest.raises(BudgetError, match=r"drop .* points > 5"):
        tpuedge.build(program, "android", tmp_path / "a", quantize="int8", per_channel=False, calibration=cal,
                      eval=(cal, labels), min_cosine=0.0, max_drop=5.0)
    with pytest.raises(UserError, match="--max-drop .* needs labelled evaluation data"):
        program.lower("android", quantize="int8", calibration=cal, max_drop=1.0)


def test_eval_npz_with_labels_sets_task_accuracy_from_the_cli(outlier, tmp_path):
    """--eval data.npz: the inputs keyed by input name, labels under `labels` (old code: the path was
    read as a Python factory and the build exited 2 with "names no factory function")."""
    work, program, cal = outlier
    labels = np.argmax(np.concatenate([program.run(x[None])[0] for x in cal]), axis=-1)  # float accuracy 100%
    np.savez(tmp_path / "eval.npz", **{program.inputs[0].name: cal, "labels": labels})
    common = ("build", f"{work / 'outlier.py'}:build", "--target", "android", "--no-cache", "--eval", str(tmp_path / "eval.npz"))

    code, stdout, err = run_cli(*common, "--quantize", "none", "--max-drop", "1", "--out", str(tmp_path / "float"))
    assert code == 0, (stdout, err)
    entry = json.loads((tmp_path / "float" / "manifest.json").read_text())["accuracy_budget"]
    assert entry["inputs"] == "eval data" and entry["samples"] == len(cal) and entry["measured"]["drop_points"] == 0.0

    code, _, err = run_cli(*common, "--quantize", "int8", "--no-per-channel", "--calibration", str(work / "cal.npy"),
                           "--min-cosine", "0", "--max-drop", "5", "--out", str(tmp_path / "int8"))
    assert code == 1 and "points > 5" in err, err  # the labels were read: the task accuracy fell

    np.savez(tmp_path / "bad.npz", **{program.inputs[0].name: cal, "labels": labels.astype(np.float32)})
    code, _, err = run_cli(*common[:-1], str(tmp_path / "bad.npz"), "--quantize", "none", "--out", str(tmp_path / "bad"))
    assert code == 2 and "'labels' must hold one integer class index per sample" in err, err
    assert not (tmp_path / "bad").exists()


def test_float_build_meets_the_default_on_smoke_inputs(outlier, tmp_path):
    _, program, _ = outlier
    art = tpuedge.build(program, "android", tmp_path / "f", quantize="none")
    entry = art.manifest["accuracy_budget"]
    assert entry["met"] and entry["measured"]["sample_cosine_per_output"][0] > 0.9999
    assert "random" in entry["inputs"] or "generated" in entry["inputs"]  # the report says they are smoke inputs


def test_defaults_pass_on_digits_int8_with_max_drop(digits_model, digits_program, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "digits"))
    import model as digits

    _, _, _, x_test, y_test = digits_model
    art = tpuedge.build(digits_program, "android", tmp_path / "d", quantize="int8", calibration=digits.calibration(),
                        eval=(x_test, y_test), max_drop=1.0)
    entry = art.manifest["accuracy_budget"]
    assert entry["met"] and not entry["written_below_budget"], entry
    assert entry["measured"]["sample_cosine_per_output"][0] >= 0.99
    assert entry["measured"]["drop_points"] <= 1.0 and entry["samples"] == 64 and entry["inputs"] == "eval data"
    assert "accuracy budget met" in art.report()


def test_build_help_lists_the_budget_flags():
    code, out, _ = run_cli("build", "--help")
    assert code == 0
    for flag in ("--min-cosine", "--min-top1", "--max-drop", "--allow-below-budget", "--eval"):
        assert flag in out, flag
