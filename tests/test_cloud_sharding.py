"""Data parallel and FSDP train steps on 8 host CPU devices match the single-device loss.

JAX fixes its device count at start-up, so the 8-device run happens in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (the test process keeps its own JAX).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import copy, json, sys
    import numpy as np, torch, torch.nn.functional as F
    sys.path.insert(0, sys.argv[1])
    from models import MLP, DepthwiseSeparable
    import jax
    import tpuedge.cloud
    from tpuedge.shared_ir.errors import UserError

    torch.set_num_threads(1)
    result = {"devices": len(jax.devices())}

    def curve(model, batch, mesh, steps=5):
        model = copy.deepcopy(model)
        step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.AdamW(model.parameters(), lr=1e-2), batch, mesh=mesh)
        losses = [float(step(*batch)) for _ in range(steps)]
        return step, losses

    torch.manual_seed(0)
    mlp, batch = MLP(), (torch.randn(16, 32), torch.randint(0, 10, (16,)))
    for mesh in (None, "data:8", "fsdp:8", "data:2,fsdp:4"):
        step, losses = curve(mlp, batch, mesh)
        fc1 = step.state["params"]["model.fc1.weight"]
        mu = step.state["opt_state"].mu["model.fc1.weight"]
        result[str(mesh)] = {
            "losses": losses,
            "fc1_spec": str(fc1.sharding.spec) if mesh else None,
            "fc1_shard_shape": list(fc1.addressable_shards[0].data.shape),
            "mu_shard_shape": list(mu.addressable_shards[0].data.shape),
        }
        if mesh == "fsdp:8":
            step.sync_to(mlp_copy := copy.deepcopy(mlp))
            result["fsdp_synced_equal"] = bool(np.allclose(mlp_copy.fc1.weight.detach().numpy(), np.asarray(fc1)))
            text = step.lower().as_text()
            result["fsdp_hlo_has_collectives"] = ("all_gather" in text or "all-gather" in text or "sharding" in text)
            compiled = step.lower().compile().as_text()
            result["fsdp_compiled_collectives"] = sum(compiled.count(c) for c in ("all-gather", "all-reduce", "reduce-scatter"))

    torch.manual_seed(0)
    cnn, cbatch = DepthwiseSeparable(), (torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,)))
    for mesh in (None, "data:8"):
        step, losses = curve(cnn, cbatch, mesh, steps=3)
        result["cnn " + str(mesh)] = {
            "losses": losses,
            "running_mean": np.asarray(step.state["buffers"]["model.bn_pw.running_mean"]).tolist(),
        }
    try:
        curve(mlp, (torch.randn(12, 32), torch.randint(0, 10, (12,))), "data:8", steps=1)
        result["indivisible"] = "no error"
    except UserError as exc:
        result["indivisible"] = str(exc)
    print("RESULT " + json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def sharded_run(repo_root: Path, tmp_path_factory):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(repo_root / "examples")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path_factory.mktemp("sharded"),  # outside the repo: its bare tpuedge/ must not shadow the install
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def test_eight_devices_are_used(sharded_run):
    assert sharded_run["devices"] == 8


@pytest.mark.parametrize("mesh", ["data:8", "fsdp:8", "data:2,fsdp:4"])
def test_sharded_loss_matches_single_device(sharded_run, mesh):
    single = sharded_run["None"]["losses"]
    assert _rel(sharded_run[mesh]["losses"], single) < 1e-5, (sharded_run[mesh]["losses"], single)
    assert single[-1] < single[0]


def test_data_parallel_replicates_and_fsdp_shards_params_and_moments(sharded_run):
    # fc1.weight is (64, 32): replicated under data parallel, split 8 (or 4) ways under fsdp
    assert sharded_run["data:8"]["fc1_shard_shape"] == [64, 32]
    assert sharded_run["fsdp:8"]["fc1_shard_shape"] == [8, 32]
    assert sharded_run["fsdp:8"]["mu_shard_shape"] == [8, 32]  # Adam's moment follows its parameter
    assert "fsdp" in sharded_run["fsdp:8"]["fc1_spec"]
    assert sharded_run["data:2,fsdp:4"]["fc1_shard_shape"] == [16, 32]
    assert sharded_run["fsdp_synced_equal"] is True
    assert sharded_run["fsdp_compiled_collectives"] > 0


def test_batchnorm_statistics_span_the_whole_sharded_batch(sharded_run):
    single, sharded = sharded_run["cnn None"], sharded_run["cnn data:8"]
    assert _rel(sharded["losses"], single["losses"]) < 1e-5
    diff = max(abs(a - b) for a, b in zip(sharded["running_mean"], single["running_mean"]))
    assert diff < 1e-5


def test_batch_that_does_not_split_is_a_user_error(sharded_run):
    assert "multiple of 8" in sharded_run["indivisible"]
