"""Every upstream fast path off (`public_api_only()`, as on an unverified torch, litert-torch,
ai-edge-quantizer or jax) gives the same artifacts, byte for byte, as the fast paths; patches
are scoped to the threads inside their block and undone after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.upstream_gate import ScopedPatch, public_api_only, verified


class _Small(torch.nn.Module):
    """Conv, BatchNorm, in-place ReLU, pool, Linear: the in-place decomposition, a direct
    lowering, the layout pass and the CIA walk all have work here."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.relu = torch.nn.ReLU(inplace=True)
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(self.relu(self.bn(self.conv(x))), 2)
        return self.fc(y.flatten(1))


def _saved_program(tmp_path):
    torch.manual_seed(0)
    module = _Small().eval()
    with torch.no_grad():
        module.bn.running_mean.uniform_(-0.5, 0.5)
        module.bn.running_var.uniform_(0.5, 1.5)
    path = tmp_path / "small.pt2"
    tpuedge.export(module, (torch.zeros(1, 1, 8, 8),), name="small").save(path)
    return path


def _calibration():
    rng = np.random.default_rng(0)
    return [[rng.standard_normal((1, 1, 8, 8)).astype(np.float32)] for _ in range(16)]


def _build(pt2, target, out, **options) -> dict[str, bytes]:
    from tpuedge.edge.litert.float_model import clear_float_cache
    from tpuedge.shared_ir.program import Program

    clear_float_cache()  # the last float models, kept in memory: each build converts its own
    Program.load(pt2)  # the first load writes the snapshot the next one reads (on the fast path)
    tpuedge.build(
        Program.load(pt2), target, out, calibration=_calibration(), eval="none", allow_below_budget=True, **options
    )
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".tflite", ".cc", ".h")}


_EDGE = {
    "program snapshot",
    "pytree",
    "composite-implicit op walk",
    "in-place decomposition",
    "layout pass functions",
    "direct lowerings",
    "large weights sliced",
}


@pytest.mark.parametrize(
    "target,options,fast_paths",
    [
        # NHWC inputs: their tensor metadata; a convolution's NHWC wrapper: the kernel lookup
        ("mcu", {}, _EDGE | {"tensor metadata", "composite-implicit kernel lookup"}),
        pytest.param("android", {"quantize": "int8"}, _EDGE, marks=pytest.mark.slow),  # the same lowering, NCHW
    ],
)
def test_public_routes_give_the_same_artifact_bytes(target, options, fast_paths, tmp_path, monkeypatch):
    """Which fast paths a build takes is checked too: each named one fell back, so the build
    really ran its public route."""
    if not (verified("torch", ("2.13",)) and verified("litert-torch", ("0.10",))):
        pytest.skip("the fast paths are off on this stack already")
    pt2 = _saved_program(tmp_path)
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "fast-cache"))  # a cache each: nothing shared
    fast = _build(pt2, target, tmp_path / "fast", **options)
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "public-cache"))
    with public_api_only() as taken:
        public = _build(pt2, target, tmp_path / "public", **options)
    assert fast.keys() == public.keys() and "model.tflite" in fast
    for name in fast:
        assert fast[name] == public[name], f"{target} {name}: the public routes wrote other bytes"
    assert taken == fast_paths, sorted(taken)


def test_a_scoped_patch_reaches_only_the_threads_inside_it():
    class Library:
        @staticmethod
        def walk():
            return "original"

    patch = ScopedPatch()
    original = Library.walk

    def install(p):
        Library.walk = p.route(lambda: "ours", original)
        return lambda: setattr(Library, "walk", original)

    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        inside.wait()
        seen["other"] = Library.walk()
        outside.set()

    worker = threading.Thread(target=other_thread)
    worker.start()
    with patch.held(install):
        seen["inside"] = Library.walk()
        inside.set()
        outside.wait(10)
    worker.join()
    assert seen == {"inside": "ours", "other": "original"}
    assert Library.walk is original


def test_torch_s_op_walk_is_patched_only_inside_the_block():
    from torch._export import utils as export_utils

    from tpuedge.shared_ir.torch_compat import cia_ops_walked_once

    walk = export_utils._materialize_cpp_cia_ops
    with cia_ops_walked_once():
        if verified("torch", ("2.13",)):
            assert export_utils._materialize_cpp_cia_ops.__wrapped__ is walk
    assert export_utils._materialize_cpp_cia_ops is walk
    with public_api_only(), cia_ops_walked_once():
        assert export_utils._materialize_cpp_cia_ops is walk  # the public route patches nothing


def test_the_x64_switch_is_kept_on_both_routes():
    """What litert-torch's import does, done in the block: on the verified jax the switch does not
    take effect; on the public route it does, and is put back when the block ends."""
    import jax

    from tpuedge.shared_ir.jax_compat import x64_switch_kept

    assert not jax.config.jax_enable_x64
    try:
        with x64_switch_kept():
            jax.config.update("jax_enable_x64", True)
            during = bool(jax.config.jax_enable_x64)
        assert not jax.config.jax_enable_x64 and during is not verified("jax", ("0.10.2",))
        with public_api_only() as taken, x64_switch_kept():
            jax.config.update("jax_enable_x64", True)
            assert jax.config.jax_enable_x64
        assert not jax.config.jax_enable_x64 and taken == {"x64 switch ignored on import"}
    finally:
        jax.config.update("jax_enable_x64", False)


_IMPORT = """
import json, sys
import jax
from tpuedge.edge.litert.litert_session import litert_session
from tpuedge.shared_ir.upstream_gate import fallbacks_taken
with litert_session():
    inside = bool(jax.config.jax_enable_x64)
print(json.dumps({"inside": inside, "after": bool(jax.config.jax_enable_x64), "taken": sorted(fallbacks_taken())}))
"""


@pytest.mark.slow  # a fresh process importing litert-torch
def test_litert_torch_s_import_leaves_x64_off_on_the_public_route_too():
    """Without the fast path, litert-torch's import switches x64 on process-wide, and the public
    `jax.config.update` puts it back right after."""
    env = {**os.environ, "TPUEDGE_PUBLIC_API_ONLY": "1", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", _IMPORT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["inside"] is True and result["after"] is False  # the session's thread-local x64 only
    assert "x64 switch ignored on import" in result["taken"]


def test_a_gate_takes_only_the_verified_releases(monkeypatch):
    from tpuedge.shared_ir import upstream_gate

    installed = {"torch": "2.13.0+cpu", "jax": "0.10.20", "litert-torch": "0.10.1", "ai-edge-quantizer": "0.11.0"}
    monkeypatch.setattr(upstream_gate, "_installed", installed.get)
    assert verified("torch", ("2.13",)) and verified("litert-torch", ("0.10",))
    assert not verified("jax", ("0.10.2",)) and not verified("ai-edge-quantizer", ("0.10",))
    assert not verified("tflite-micro", ("0.1",))  # not installed
    monkeypatch.setenv("TPUEDGE_PUBLIC_API_ONLY", "1")
    assert not verified("torch", ("2.13",))
