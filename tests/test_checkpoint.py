"""Orbax checkpoints of a train step in one process: bitwise resume, keep-N, refusing another
model's or a damaged checkpoint, and SIGTERM saving before the next step."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from multiprocess_job import build_step, share
from tpuedge.shared_ir.errors import UserError


@pytest.fixture(autouse=True)
def _keep_sigterm():
    """A step with a checkpoint folder takes SIGTERM (preemption); give the test process its own back."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _losses(step, start, stop):
    return [float(step(*share(i))) for i in range(start, stop)]


def _params(step):
    return step.state_dict()["params"]


def test_resume_after_step_k_gives_bitwise_the_same_steps(tmp_path):
    """Steps 4..8 after a resume from step 3 equal those of a run that never stopped: the
    parameters, AdamW moments, StepLR position, dropout key and data position all come back."""
    step = build_step(None)
    _losses(step, 0, 3)
    assert step.save(tmp_path / "ck") == 3  # async: training goes on while it is written
    through = _losses(step, 3, 9)  # past StepLR's step_size 7: the schedule position matters
    step.wait_until_saved()

    resumed = build_step(None, resume=tmp_path / "ck")
    assert resumed.data_position == 3 and resumed.step_count == 3
    assert _losses(resumed, 3, 9) == through
    for name, value in _params(step).items():
        assert np.array_equal(_params(resumed)[name], value), name
    assert resumed.learning_rates == step.learning_rates


def test_an_empty_folder_starts_fresh_and_keep_rotates_old_checkpoints(tmp_path):
    fresh = build_step(None, resume=tmp_path / "new")
    assert fresh.data_position == 0 and fresh.step_count == 0
    for i in range(5):
        fresh(*share(i))
        fresh.save(tmp_path / "new", keep=2, data_position={"epoch": 0, "batch": i + 1})
    fresh.wait_until_saved()
    assert sorted(int(p.name) for p in (tmp_path / "new").iterdir() if p.name.isdigit()) == [4, 5]
    again = build_step(None, resume=tmp_path / "new")
    assert again.data_position == {"epoch": 0, "batch": 5}


@pytest.mark.parametrize("change", ["hidden", "optimizer"])
def test_a_checkpoint_of_another_model_or_optimizer_is_refused(tmp_path, change):
    step = build_step(None)
    step(*share(0))
    step.save(tmp_path / "ck", wait=True)
    kwargs = {"hidden": 32} if change == "hidden" else {"other_optimizer": True}
    with pytest.raises(UserError, match="different model or optimizer") as caught:
        build_step(None, resume=tmp_path / "ck", **kwargs)
    assert "\n" not in str(caught.value)
    if change == "hidden":
        assert "model.fc1.bias is [64] float32 there, [32] float32 here" in str(caught.value)


@pytest.mark.parametrize("damage", ["state", "record"])
def test_a_damaged_checkpoint_is_one_paragraph(tmp_path, damage):
    step = build_step(None)
    step(*share(0))
    step.save(tmp_path / "ck", wait=True)
    folder = tmp_path / "ck" / "1" / damage
    files = [p for p in folder.rglob("*") if p.is_file() and p.stat().st_size]
    assert files
    for path in files:
        path.write_bytes(b"\x00not a checkpoint" * 4)
    with pytest.raises(UserError, match="damaged or incomplete") as caught:
        build_step(None, resume=tmp_path / "ck")
    assert "\n" not in str(caught.value) and "step 1" in str(caught.value)


def test_sigterm_saves_before_the_next_step_and_exits_cleanly(tmp_path):
    step = build_step(None, resume=tmp_path / "ck")  # knows its folder: SIGTERM now means "save and stop"
    with pytest.raises(SystemExit) as stopped:
        for i in range(10):
            step(*share(i))
            if i == 3:
                os.kill(os.getpid(), signal.SIGTERM)  # as a TPU VM's preemption notice, mid-run
    assert stopped.value.code == 0 and step.step_count == 4
    resumed = build_step(None, resume=tmp_path / "ck")
    assert resumed.data_position == 4  # steps 0..3 ran; the one after the notice is redone

    expected = _losses(build_step(None), 0, 7)
    assert _losses(resumed, 4, 7) == expected[4:]
