"""Tests that compile for a TPU skip with a reason, not crash, where libtpu is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEEDS_LIBTPU = (
    "test_rebuild_is_byte_identical_and_holds_no_machine_paths",
    "test_batch_rebinds_a_saved_program_when_its_graph_allows",
    "test_cli_factory_with_batch_and_train_step",
)


def test_libtpu_tests_skip_with_the_reason_when_libtpu_is_missing():
    # TPUEDGE_LIBTPU=off is the build's own switch: it answers as a machine without libtpu does
    env = {**os.environ, "TPUEDGE_LIBTPU": "off"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:randomly",
            "tests/test_cloud_build.py",
            "-k",
            " or ".join(NEEDS_LIBTPU),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"{len(NEEDS_LIBTPU)} skipped" in proc.stdout, proc.stdout[-3000:]
    assert proc.stdout.count("needs libtpu: libtpu switched off by TPUEDGE_LIBTPU=off") == len(NEEDS_LIBTPU)
