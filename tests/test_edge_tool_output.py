"""What the edge toolchain prints is held, not lost: shown with TPUEDGE_VERBOSE=1 and carried by
the error when a tool fails. Each case runs in a child process, since the LiteRT interpreter logs
its XNNPACK line only once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tpuedge

XNNPACK = "Created TensorFlow Lite XNNPACK delegate"


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def float_tflite(tmp_path_factory):
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tool_output") / "net"
    tpuedge.build(tpuedge.export(_Net(), (torch.zeros(1, 4),), name="net"), "android", out, quantize="none")
    return out / "model.tflite"


_QUANTIZE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from tpuedge.edge.litert import quantizer_runner
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.quantize.config import QuantConfig

    width = int(sys.argv[2])  # 4 fits the model; 5 makes the quantizer's interpreter fail
    quantize = run_quantizer(open(sys.argv[1], "rb").read())
    recipe = quantizer_recipe(QuantConfig(scheme="int8", io_dtype="int8"))
    samples = [{"x": np.full((1, width), i, np.float32)} for i in range(8)]
    try:
        quantize.calibrate(recipe, samples)
        print(json.dumps({"bytes": len(quantize(recipe))}))
    except getattr(quantizer_runner, "QuantizerError", Exception) as exc:
        print(json.dumps({"error": str(exc), "log": getattr(exc, "log", "")}))
    """
)


def _child(float_tflite, width: int, verbose: bool):
    env = {k: v for k, v in os.environ.items() if k != "TPUEDGE_VERBOSE"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tpuedge.__path__[0]).rsplit("/", 1)[0], env.get("PYTHONPATH")) if p
    )
    env["TPUEDGE_NO_CACHE"] = "1"  # a cached calibration would skip the quantizer's interpreter
    if verbose:
        env["TPUEDGE_VERBOSE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", _QUANTIZE, str(float_tflite), str(width)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_quantizer_output_is_held_and_shown_with_verbose(float_tflite):
    result, stderr = _child(float_tflite, 4, verbose=False)
    assert result["bytes"] > 0
    assert XNNPACK not in stderr, stderr
    result, stderr = _child(float_tflite, 4, verbose=True)
    assert result["bytes"] > 0
    assert XNNPACK in stderr, stderr


def test_a_quantizer_failure_carries_what_it_printed(float_tflite):
    result, stderr = _child(float_tflite, 5, verbose=False)
    assert "ai-edge-quantizer failed while calibrating on 8 sample(s)" in result["error"]
    assert "XNNPack delegate failed to reshape" in result["error"]  # the tool's own exception
    assert XNNPACK in result["log"] and XNNPACK in result["error"]  # and what it printed before failing
    assert XNNPACK not in stderr


NATIVE_LINES = ("All log messages before absl::InitializeLog()", "oneDNN custom operations", XNNPACK)


def _cli_build(tmp_path, verbose: bool) -> subprocess.CompletedProcess:
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TPUEDGE_VERBOSE"}
    if verbose:
        env["TPUEDGE_VERBOSE"] = "1"
    exe = Path(sys.executable).with_name("tpuedge")
    model = Path(__file__).resolve().parents[1] / "examples" / "models.py"
    out = tmp_path / ("verbose" if verbose else "quiet")
    return subprocess.run(
        [
            str(exe),
            "build",
            f"{model}:build_mlp",
            "--target",
            "android",
            "--out",
            str(out),
            "--no-cache",
        ],  # a cached float model would skip the converter and its log
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_a_default_edge_build_prints_no_native_log_lines_and_verbose_shows_them(tmp_path):
    quiet = _cli_build(tmp_path, verbose=False)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "accuracy vs float IR" in quiet.stdout
    for line in NATIVE_LINES:
        assert line not in quiet.stderr, quiet.stderr
    loud = _cli_build(tmp_path, verbose=True)
    assert loud.returncode == 0, loud.stderr[-3000:]
    # The interpreter's XNNPACK line comes on every machine; the converter's absl and oneDNN
    # notices depend on the CPU and its build, so their absence on a machine is no failure.
    assert XNNPACK in loud.stderr, loud.stderr


_THREADS = """
import os, sys, threading
from tpuedge.edge.tool_output import held_tool_output

started, done = threading.Event(), threading.Event()

def user_thread():
    started.wait()
    print("user thread line", file=sys.stderr)
    done.set()

worker = threading.Thread(target=user_thread)
worker.start()
with held_tool_output("tool") as printed:
    print("tool python line", file=sys.stderr)
    os.write(2, b"tool native line\\n")
    started.set()
    done.wait()
worker.join()
print(repr(printed[0]))
"""


def test_only_the_tools_thread_is_held_not_a_users_thread_beside_it():
    env = {k: v for k, v in os.environ.items() if k != "TPUEDGE_VERBOSE"}
    proc = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    held = proc.stdout.strip()
    assert "tool python line" in held and "tool native line" in held and "user thread line" not in held
    assert "user thread line" in proc.stderr and "tool" not in proc.stderr


def test_the_every_op_float_recipe_overwrites_no_entry_of_its_own(caplog):
    """Float compute with int8 weights is one entry per weighted op, not a no-quantize entry that
    a weight-only one then overwrites: ai-edge-quantizer logs a multi-line warning per overwrite."""
    import logging

    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.sensitive_groups import every_op_group
    from tpuedge.quantize.config import QuantConfig

    group, scopes = every_op_group(
        [("FULLY_CONNECTED", "FULLY_CONNECTED", 2), ("CONV_2D", "CONV_2D", 1), ("ADD", "ADD", 1)]
    )
    with caplog.at_level(logging.WARNING, logger="absl"):
        recipe = quantizer_recipe(QuantConfig(scheme="int8"), {group.key: "float"}, {group.key: scopes})
    assert not [r for r in caplog.records if "Overwrite" in r.getMessage()]
    by_op = {entry["operation"]: entry for entry in recipe}
    assert by_op["FULLY_CONNECTED"]["op_config"]["compute_precision"] == "FLOAT"
    assert by_op["FULLY_CONNECTED"]["op_config"]["weight_tensor_config"]["num_bits"] == 8
    assert by_op["ADD"]["algorithm_key"] == "no_quantize"
