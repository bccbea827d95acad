"""Third-party output during a build is held: kept in the build's log, shown after the error when
the build fails, shown as it happens with --verbose (or TPUEDGE_VERBOSE=1).

The trigger is real: an LSTM with dropout and one layer makes torch warn from its own rnn module
when the model is made, and torch.export warns (attributed to the standard library's contextlib)
about the LSTM's flat weights. Each case runs in a child process, as a user's shell runs it:
warnings show once per process, and the capture changes process-wide hooks while it is open.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 8, num_layers=1, dropout=0.1, batch_first=True)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out)


    def build():
        torch.manual_seed(0)
        return Tagger().eval(), (torch.randn(1, 5, 4),)


    def wrong_calibration():
        return [(torch.randn(1, 6, 4),) for _ in range(8)]


    def logged_calibration():
        import logging

        logging.getLogger("tagger.data").warning("tagger: 8 calibration clips read")
        return [(torch.randn(1, 5, 4),) for _ in range(8)]
    """
)
TORCH_WARNING = "dropout option adds dropout after all but last recurrent layer"
EXPORT_WARNING = "were assigned during export"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("held")
    (folder / "tagger.py").write_text(MODEL)
    return folder


def _tpuedge(work: Path, *args: str, verbose_env: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TPUEDGE_VERBOSE", "PYTHONWARNINGS")}
    env["TPUEDGE_NO_CACHE"] = "1"
    if verbose_env:
        env["TPUEDGE_VERBOSE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "tpuedge.cli", *args], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_build_prints_no_third_party_lines_and_keeps_them_in_its_log(work):
    proc = _tpuedge(work, "build", "tagger.py:build", "-t", "android", "--quantize", "none", "--out", "quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout + proc.stderr
    assert "wrote quiet" in proc.stdout
    assert TORCH_WARNING not in printed and EXPORT_WARNING not in printed, printed
    assert proc.stderr == "", proc.stderr
    log = (work / "quiet.build.log").read_text()
    assert TORCH_WARNING in log and EXPORT_WARNING in log
    # the output folder stays the artifact alone: its bytes don't depend on what a library printed
    assert sorted(p.name for p in (work / "quiet").iterdir()) == ["manifest.json", "model.tflite"]


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_verbose_shows_third_party_lines_as_they_happen(work, how):
    flag = ["--verbose"] if how == "flag" else []
    proc = _tpuedge(
        work,
        "build",
        "tagger.py:build",
        "-t",
        "android",
        "--quantize",
        "none",
        "--out",
        f"loud-{how}",
        *flag,
        verbose_env=how == "environment",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert TORCH_WARNING in proc.stderr and EXPORT_WARNING in proc.stderr, proc.stderr
    assert proc.stderr.index(TORCH_WARNING) < proc.stderr.index(EXPORT_WARNING)  # in the order they came
    assert not (work / f"loud-{how}.build.log").exists()  # shown, so nothing held


def test_a_failing_build_shows_its_error_then_the_held_output(work):
    proc = _tpuedge(
        work,
        "build",
        "tagger.py:build",
        "-t",
        "android",
        "--quantize",
        "int8",
        "--calibration",
        "tagger.py:wrong_calibration",
        "--out",
        "failed",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert err.startswith("error: Calibration data (tagger.py:wrong_calibration) does not fit the model"), err
    error_line, _, held = err.partition("\n")
    assert held.startswith("third-party output held during this run"), err
    assert TORCH_WARNING in held and EXPORT_WARNING in held
    assert not (work / "failed").exists()  # nothing half-written; the log beside it keeps the lines
    assert TORCH_WARNING in (work / "failed.build.log").read_text()


def test_check_holds_the_same_output_and_shows_it_with_verbose(work):
    quiet = _tpuedge(work, "check", "tagger.py:build", "-t", "android")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert TORCH_WARNING not in quiet.stdout + quiet.stderr
    loud = _tpuedge(work, "check", "tagger.py:build", "-t", "android", "--verbose")
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert TORCH_WARNING in loud.stderr


API_BUILD = textwrap.dedent(
    """
    import sys

    import tpuedge

    sys.path.insert(0, sys.argv[1])
    from tagger import build

    program = tpuedge.export(*build(), name="tagger")
    print("=== build", file=sys.stderr, flush=True)
    tpuedge.build(program, "android", sys.argv[2], quantize="none")
    """
)


def test_the_python_api_build_holds_the_same_output(work):
    """What the converter's imports log (torchao, torch's pytree, absl's native start-up lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TPUEDGE_VERBOSE", "PYTHONWARNINGS")}
    env["TPUEDGE_NO_CACHE"] = "1"
    out = work / "api"
    proc = subprocess.run(
        [sys.executable, "-c", API_BUILD, str(work), str(out)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.rstrip().endswith("=== build"), proc.stderr  # nothing after the build began
    log = (work / "api.build.log").read_text()
    assert "Created TensorFlow Lite XNNPACK delegate" in log  # the interpreter's native line, handed on


def test_the_user_s_own_log_lines_show_during_a_build(work):
    """Only libraries' records are held: a line the user's calibration function logs shows."""
    proc = _tpuedge(
        work, "build", "tagger.py:build", "-t", "android", "--quantize", "dynamic-int8",
        "--calibration", "tagger.py:logged_calibration", "--out", "logged",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tagger: 8 calibration clips read" in proc.stderr
    assert TORCH_WARNING not in proc.stderr  # the library's warning is still held


@pytest.mark.parametrize("command", ["build", "check", "verify", "generate"])
def test_the_commands_that_run_libraries_take_verbose(command):
    from tpuedge.cli import cli

    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "--verbose" in result.output and "TPUEDGE_VERBOSE=1" in " ".join(result.output.split())
