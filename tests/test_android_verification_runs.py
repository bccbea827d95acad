"""An android build's two verification runs, the float reference (the IR in torch) and the model in
LiteRT, run side by side (`edge/android/verification_runs.py`): the reference in a thread of
its own, with the outputs it gives when run alone, and a LiteRT refusal still reported as one."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.android.verification_runs import verification_runs
from tpuedge.edge.litert.litert_runtime import ModelRunError


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.manual_seed(0)
    program = tpuedge.export(_Net().eval(), (torch.randn(1, 3, 16, 16),), name="net")
    out = tmp_path_factory.mktemp("net") / "android"
    tpuedge.build(program, "android", out, quantize="none")
    return program, (out / "model.tflite").read_bytes()


def test_the_reference_runs_in_its_own_thread_and_gives_what_it_gives_alone(built, monkeypatch):
    program, tflite = built
    samples = program.example_inputs(seed=7, count=4)
    alone = [program.run(*s) for s in samples]
    program.__dict__.pop("_run_memo", None)  # the build's runs, not remembered outputs
    threads = []
    run = type(program).run

    def recording_run(self, *inputs):
        threads.append(threading.current_thread().name)
        return run(self, *inputs)

    monkeypatch.setattr(type(program), "run", recording_run)
    runner, reference, outputs = verification_runs(program, tflite, samples, channels_last=False)
    assert threads and all(name.startswith("tpuedge-float-reference") for name in threads)
    for got, want in zip(reference, alone):
        np.testing.assert_array_equal(got[0], want[0])
    for got, want in zip(outputs, alone):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    assert [t.name for t in runner.inputs]


def test_a_litert_refusal_still_raises_once_the_reference_is_done(built, monkeypatch):
    program, tflite = built
    from tpuedge.edge.litert import litert_runtime

    def refuse(self, inputs):
        raise ModelRunError("a kernel refused its values")

    monkeypatch.setattr(litert_runtime.LiteRTRunner, "run", refuse)
    with pytest.raises(ModelRunError, match="refused"):
        verification_runs(program, tflite, program.example_inputs(seed=1, count=2), channels_last=False)


def test_a_reference_computed_before_the_conversion_is_not_run_again(built, monkeypatch):
    program, tflite = built
    samples = program.example_inputs(seed=3, count=2)
    given = [program.run(*s) for s in samples]

    def no_run(self, *inputs):
        raise AssertionError("the reference was given")

    monkeypatch.setattr(type(program), "run", no_run)
    _, reference, outputs = verification_runs(program, tflite, samples, channels_last=False, reference=given)
    assert reference is given and len(outputs) == 2


def test_a_failing_litert_run_leaves_the_reference_s_unstarted_samples_unrun(built, monkeypatch):
    """An error (or Ctrl-C) in the LiteRT run does not wait for the reference over every sample:
    the one running finishes, the rest are dropped."""
    program, tflite = built
    from tpuedge.edge.litert import litert_runtime

    count = 8
    every_sample_cancelled = threading.Event()
    cancels, calls = [], []
    run, cancel = type(program).run, Future.cancel

    def counted_cancel(future):
        cancels.append(future)
        if len(cancels) == count:
            every_sample_cancelled.set()
        return cancel(future)

    def slow_first_run(self, *inputs):
        calls.append(1)
        if len(calls) == 1:  # the one running finishes only after the main thread dropped the rest
            assert every_sample_cancelled.wait(30)
        return run(self, *inputs)

    def fail(self, inputs):
        raise RuntimeError("not a kernel's refusal")

    monkeypatch.setattr(Future, "cancel", counted_cancel)
    monkeypatch.setattr(type(program), "run", slow_first_run)
    monkeypatch.setattr(litert_runtime.LiteRTRunner, "run", fail)
    with pytest.raises(RuntimeError, match="kernel"):
        verification_runs(program, tflite, program.example_inputs(seed=2, count=count), channels_last=False)
    assert len(calls) <= 1  # at most the sample already running when LiteRT failed
