"""litert-torch flips JAX's x64 mode on import; edge builds must leave the user's mode as it was,
so the cloud backend gives the same artifacts whether or not an edge build ran first."""

from __future__ import annotations

import jax
import pytest

import tpuedge
from models import build_mlp
from tpuedge.edge.litert.convert import program_to_tflite
from tpuedge.quantize import QuantConfig


@pytest.mark.parametrize("user_mode", [False, True])
def test_edge_lowering_keeps_the_users_x64_mode(user_mode):
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", user_mode)
    try:
        program = tpuedge.export(*build_mlp())
        program.check("android")
        converted = program_to_tflite(program, QuantConfig(scheme="none"), None)
        assert len(converted.tflite) > 1000
        assert jax.config.jax_enable_x64 is user_mode
    finally:
        jax.config.update("jax_enable_x64", before)


_TWO_THREADS = """
import json, sys, threading, time
import numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, sys.argv[1])
assert "litert_torch" not in sys.modules  # the import's own switch is part of what is checked
import tpuedge
from models import build_mlp
from tpuedge.edge.litert.convert import program_to_tflite
from tpuedge.quantize import QuantConfig

program = tpuedge.export(*build_mlp())
step = jax.jit(lambda labels: labels + 1)  # a stand-in for a cloud train step fed int labels
seen, stop = set(), threading.Event()

def cloud_thread():
    while not stop.is_set():
        try:
            seen.add((bool(jax.config.jax_enable_x64), str(step(np.arange(3)).dtype)))
        except Exception as exc:  # a clash can also surface as an error inside jax
            seen.add(("error", repr(exc)[:300]))
        time.sleep(0.001)

worker = threading.Thread(target=cloud_thread)
worker.start()
try:
    tflite = program_to_tflite(program, QuantConfig(scheme="none"), None).tflite
finally:
    stop.set()
    worker.join()
print(json.dumps({"seen": sorted([str(a), str(b)] for a, b in seen), "bytes": len(tflite), "x64_after": bool(jax.config.jax_enable_x64)}))
"""


def test_an_edge_build_never_flips_x64_for_a_cloud_thread(repo_root):
    """An edge build (litert-torch's import included) in one thread; another thread of the same
    process keeps calling a jitted function the whole time and must see 32-bit mode throughout."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TPUEDGE_NO_CACHE": "1"}  # a cached float model would skip litert-torch
    proc = subprocess.run(
        [sys.executable, "-c", _TWO_THREADS, str(repo_root / "examples")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["bytes"] > 1000
    assert result["seen"] == [["False", "int32"]], result
    assert result["x64_after"] is False


_NO_BACKEND = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
import tpuedge
import tpuedge.edge.litert.litert_session as session
from jax._src import xla_bridge
from tpuedge.edge.litert.litert_lowering import lower_to_float_flatbuffer

class Net(torch.nn.Module):  # GELU: an op litert-torch lowers through its jax bridge (not edge/litert/direct_lowerings.py)
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x))

torch.manual_seed(0)
net, x = Net().eval(), torch.randn(4, 16)
own = lower_to_float_flatbuffer(tpuedge.export(net, (x,)))
started = sorted(xla_bridge._backends)  # private: JAX has no public "is a backend up" query
getattr(session, "_lowering_cpu", [])[:] = [None]  # JAX's own default device, as litert-torch alone would lower
default = lower_to_float_flatbuffer(tpuedge.export(net, (x,)))
print(json.dumps({"started": started, "same": own == default, "after_default": sorted(xla_bridge._backends)}))
"""


def test_an_edge_lowering_starts_no_jax_backend(repo_root):
    """litert-torch's jax bridge lowers on a CPU client of tpuedge's own: JAX's backends (with
    libtpu installed, the TPU runtime: ~110 MB) stay unstarted, and the bytes are those of a
    lowering on JAX's own default device. JAX_PLATFORMS is left unset, as a user's script has it."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["TPUEDGE_NO_CACHE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", _NO_BACKEND, str(repo_root / "examples")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["started"] == [], result
    assert result["after_default"], result  # the comparison really lowered on JAX's default device
    assert result["same"] is True
