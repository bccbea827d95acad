"""One train_step in a job of several processes (jax.distributed on host CPU devices, gloo
collectives), started by `python -m tpuedge.cloud.launch`: the same numbers as one process,
checkpoints that restore onto another mesh, preemption by SIGTERM, and the share errors.

Each job runs tests/fixtures/multiprocess_job.py; its process 0 writes the losses and final
parameters. Every job is time-bound and its process groups are killed when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from multiprocess_job import build_step, share

JOB = Path(__file__).parent / "fixtures" / "multiprocess_job.py"
JOB_TIMEOUT_S = 400


def _start(processes: int, devices: int, out: Path, *args: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "tpuedge.cloud.launch",
        "--processes",
        str(processes),
        "--devices-per-process",
        str(devices),
        "--timeout",
        str(JOB_TIMEOUT_S - 20),
        str(JOB),
        str(out),
        *args,
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=JOB_TIMEOUT_S)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing of a failed test keeps running
        proc.communicate()
        raise
    return proc.returncode, err


def _run(processes: int, devices: int, out: Path, *args: str) -> dict:
    code, err = _finish(_start(processes, devices, out, *args))
    assert code == 0, err[-4000:]
    result = json.loads(Path(f"{out}.json").read_text())
    result["params"] = dict(np.load(f"{out}.npz"))
    result["losses"] = {int(k): v for k, v in result["losses"].items()}
    return result


def _same_within(a: dict, b: dict, rtol: float) -> None:
    assert a["losses"].keys() == b["losses"].keys()
    np.testing.assert_allclose(
        [a["losses"][k] for k in sorted(a["losses"])], [b["losses"][k] for k in sorted(b["losses"])], rtol=rtol
    )
    for name, value in a["params"].items():
        np.testing.assert_allclose(b["params"][name], value, rtol=rtol, atol=1e-6, err_msg=name)


def test_two_processes_train_as_one_device_and_their_checkpoint_restores_on_one(tmp_path):
    """2 processes x 2 devices with FSDP (parameters sharded across the processes) give one
    device's losses; the checkpoint they write restores onto one device and goes on."""
    job = _run(
        2,
        2,
        tmp_path / "job",
        "--mesh",
        "fsdp:4",
        "--steps",
        "4",
        "--resume",
        str(tmp_path / "ck"),
        "--save-every",
        "4",
    )
    assert (job["processes"], job["devices"], job["local_devices"]) == (2, 4, 2)

    alone = build_step(None)
    reference = [float(alone(*share(i))) for i in range(5)]
    np.testing.assert_allclose([job["losses"][i] for i in range(4)], reference[:4], rtol=1e-5)

    resumed = build_step(None, resume=tmp_path / "ck")  # saved over 4 devices in 2 processes, read onto 1
    assert resumed.data_position == 4
    for name, value in resumed.state_dict()["params"].items():
        assert np.array_equal(value, job["params"][name]), name
    np.testing.assert_allclose(float(resumed(*share(4))), reference[4], rtol=1e-5)


def test_the_launcher_refuses_a_missing_script(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tpuedge.cloud.launch", "--processes", "2", str(tmp_path / "none.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "does not exist" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("mesh", ["data:8", "fsdp:8"])
def test_two_processes_of_four_devices_match_one_process_of_eight(tmp_path, mesh):
    one = _run(1, 8, tmp_path / "one", "--mesh", mesh, "--steps", "20")
    two = _run(2, 4, tmp_path / "two", "--mesh", mesh, "--steps", "20")
    assert (one["devices"], two["devices"], two["processes"]) == (8, 8, 2)
    _same_within(one, two, rtol=1e-5)


def test_sigterm_to_a_two_process_job_saves_and_it_resumes_bitwise(tmp_path):
    ckpt, steps = str(tmp_path / "ck"), "14"
    job = _start(2, 4, tmp_path / "cut", "--mesh", "fsdp:8", "--steps", steps, "--resume", ckpt, "--step-sleep", "0.3")
    progress = tmp_path / "cut.progress"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (progress.exists() and progress.read_text() and int(progress.read_text()) >= 4):
        assert job.poll() is None and time.monotonic() < deadline, "the job ended before step 4"
        time.sleep(0.2)
    sent = time.monotonic()
    job.send_signal(signal.SIGTERM)  # to the launcher, which passes it to every process
    code, err = _finish(job)
    assert code == 0, err[-4000:]
    assert time.monotonic() - sent < 60, "the preempted job took over a minute to save and exit"
    assert "preempted (SIGTERM)" in err

    resumed = _run(2, 4, tmp_path / "resumed", "--mesh", "fsdp:8", "--steps", steps, "--resume", ckpt)
    cut_at = resumed["start"]
    assert 4 <= cut_at < int(steps)
    through = _run(2, 4, tmp_path / "through", "--mesh", "fsdp:8", "--steps", steps)
    assert resumed["losses"] == {k: v for k, v in through["losses"].items() if k >= cut_at}
    for name, value in through["params"].items():
        assert np.array_equal(resumed["params"][name], value), name

    # the same checkpoint, saved over 8 devices, restored onto 4 in one process
    four = _run(1, 4, tmp_path / "four", "--mesh", "data:4", "--steps", steps, "--resume", ckpt)
    assert four["start"] == cut_at
    _same_within({**four, "params": {}}, {**resumed, "params": {}}, rtol=1e-5)


def test_a_wrong_share_is_one_paragraph_and_exit_2(tmp_path):
    code, err = _finish(_start(2, 2, tmp_path / "bad", "--mesh", "data:4", "--steps", "3", "--bad-share-at", "1"))
    assert code == 2, err[-4000:]
    line = next(line for line in err.splitlines() if line.startswith("error: Process 1 fed"))
    assert "shape [7, 32]" in line and "shape [8, 32]" in line


UNEVEN = """
import jax, torch, torch.nn.functional as F, tpuedge.cloud
rows = 8 if jax.process_index() == 0 else 7
model = torch.nn.Linear(4, 3)
tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                         (torch.randn(rows, 4), torch.randint(0, 3, (rows,))), mesh="data:4")
print("built")
"""


def test_uneven_example_shares_are_refused_in_every_process(tmp_path):
    script = tmp_path / "uneven.py"
    script.write_text(UNEVEN)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tpuedge.cloud.launch",
            "--processes",
            "2",
            "--devices-per-process",
            "2",
            "--timeout",
            "300",
            str(script),
        ],
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    code, err = _finish(proc)
    assert code == 2, err[-4000:]
    assert "different shapes (process 0: [[8, 4], [8]])" in err and "different shapes (process 1: [[7, 4], [7]])" in err
