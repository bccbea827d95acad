"""TPUEDGE_STAGE_TIMES accounts for every second of a build, and names where the cloud build's go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpuedge.shared_ir.stage_times import START_UP, UNNAMED

ROOT = Path(__file__).resolve().parents[1]


def _timed_build(tmp_path: Path, target: str) -> tuple[dict, float]:
    times = tmp_path / "stages.json"
    env = {**os.environ, "TPUEDGE_STAGE_TIMES": str(times), "TPUEDGE_NO_CACHE": "1", "JAX_PLATFORMS": "cpu"}
    command = [
        sys.executable,
        "-m",
        "tpuedge.cli",
        "build",
        f"{ROOT}/examples/models.py:build_mlp",
        "--target",
        target,
        "--out",
        str(tmp_path / "out"),
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(times.read_text()), wall


@pytest.mark.needs_libtpu
def test_cloud_tpu_stage_times_add_up_to_the_wall_time_and_name_the_tpu_compile(tmp_path):
    written, wall = _timed_build(tmp_path, "cloud-tpu")
    stages = written["stages"]
    counted = sum(stages.values())
    # the process's own wall time is in the file, and the stages add up to it: the seconds before
    # the build (interpreter, imports) and those no named stage claims are stages too
    assert abs(counted - written["process_wall_s"]) < 0.05 * written["process_wall_s"] + 0.2, written
    # against the wall time measured from outside (it adds only fork/exec and the exit)
    assert counted > 0.85 * wall - 0.5, (counted, wall, stages)
    assert stages[START_UP] > 0
    for stage in (
        "import jax",
        "lower to JAX (ATen->JAX interpreter, decompositions)",
        "check on XLA:CPU against Program.run",
        "TPU: load libtpu, describe the topology",
        "TPU: XLA:TPU compile (libtpu, deviceless)",
        "write the folder",
    ):
        assert stages.get(stage, 0) > 0, (stage, stages)
    # what the named stages miss is a small part of the build
    assert stages[UNNAMED] < 0.15 * counted, stages


def test_a_plain_factory_is_checked_for_a_language_model_without_importing_transformers():
    # a non-transformers module cannot be a transformers model; importing transformers to ask took 5-15 s per build
    code = (
        "import sys, torch\nfrom tpuedge.shared_ir.model_spec import decoder_of\n"
        "assert decoder_of((torch.nn.Linear(2, 2), (torch.zeros(1, 2),))) is None\n"
        "print('transformers' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
