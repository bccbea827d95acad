"""`tpuedge build --target cloud-tpu`: the portable artifacts, their CPU run, determinism, --batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tpuedge
from tpuedge.shared_ir.errors import UserError
from cli_runner import run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PORTABLE = ("model.stablehlo.mlir", "model.jaxexport", "model.layers.jaxexport", "model.safetensors", "manifest.json")


@pytest.fixture(scope="module")
def mlp_program():
    from models import build_mlp

    module, inputs = build_mlp()
    return tpuedge.export(module, inputs, name="mlp")


@pytest.fixture(scope="module")
def mlp_build(mlp_program, tmp_path_factory):
    out = tmp_path_factory.mktemp("cloud") / "mlp"
    return tpuedge.build(mlp_program, "cloud-tpu", out), out


def test_build_writes_the_portable_artifacts_and_runs_them_on_xla_cpu(mlp_program, mlp_build):
    artifact, out = mlp_build
    for name in PORTABLE:
        assert (out / name).stat().st_size > 0, name
    reopened = tpuedge.load(out)
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = rng.standard_normal((4, 32)).astype(np.float32)
        got, want = reopened.run(x)[0], mlp_program.run(x)[0]
        assert got.dtype == np.float32 and got.shape == (4, 10)
        assert np.max(np.abs(got - want)) < 1e-5
        assert np.std(want) > 0.05  # the outputs really depend on the input
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == "cloud-tpu"
    assert manifest["ir_fingerprint"] == mlp_program.fingerprint
    assert manifest["jax_export"]["platforms"] == ["cpu", "cuda", "tpu"]
    assert manifest["weights"]["storage"].startswith("arguments")
    assert manifest["weights"]["parameter_count"] == mlp_program.parameter_count == 6922
    names = [a["name"] for a in manifest["jax_export"]["arguments"]]
    assert names[-1] == "x" and names[0] == "params['fc1.bias']" and len(names) == 7
    assert float(manifest["verification"]["max_abs_error"]) < 1e-5
    assert {"jax", "jaxlib", "libtpu", "torch"} <= set(manifest["tool_versions"])


def test_stablehlo_text_is_the_forward_with_weights_as_arguments(mlp_program, mlp_build):
    _, out = mlp_build
    text = mlp_program.lower("cloud-tpu").as_text()
    assert text == (out / "model.stablehlo.mlir").read_text()
    main = next(line for line in text.splitlines() if "func.func public @main" in line)
    assert main.count("%arg") == 7  # 6 weights + x, nothing embedded
    assert text.count("stablehlo.dot_general") == 3
    assert 'dense<"0x' not in text  # no weight tensor embedded as a constant


@pytest.mark.needs_libtpu
def test_rebuild_is_byte_identical_and_holds_no_machine_paths(mlp_program, mlp_build, tmp_path, repo_root):
    _, first = mlp_build
    second = tmp_path / "again"
    tpuedge.build(mlp_program, "cloud-tpu", second)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert "tpu_compile.json" in names  # its seconds are the stage times', so it is compared too
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    blob = (first / "model.jaxexport").read_bytes()
    assert str(repo_root).encode() not in blob and b"site-packages" not in blob


def test_weights_file_is_standard_safetensors(mlp_build, tmp_path):
    from tpuedge.cloud.safetensors_file import read_safetensors, write_safetensors

    _, out = mlp_build
    st = pytest.importorskip("safetensors.numpy")
    ours = read_safetensors(out / "model.safetensors")
    theirs = st.load_file(str(out / "model.safetensors"))
    assert sorted(ours) == sorted(theirs) and len(ours) == 6
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name])
    scalars = {"count": np.array(3, np.int32), "w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    write_safetensors(tmp_path / "s.safetensors", scalars)
    back = st.load_file(str(tmp_path / "s.safetensors"))
    assert back["count"].shape == () and int(back["count"]) == 3
    np.testing.assert_array_equal(back["w"], scalars["w"])


def test_without_libtpu_the_portable_artifacts_are_still_written(mlp_program, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("TPUEDGE_LIBTPU", "off")  # behave as if libtpu were not installed
    out = tmp_path / "nolibtpu"
    artifact = tpuedge.build(mlp_program, "cloud-tpu", out)
    notice = [line for line in capfd.readouterr().err.splitlines() if "TPU compile" in line]
    assert len(notice) == 1 and "portable artifacts are still written" in notice[0]
    assert sorted(p.name for p in out.iterdir()) == sorted(PORTABLE)
    assert artifact.manifest["tpu_compile"]["status"].startswith("skipped: libtpu switched off")
    assert artifact.tpu_compile is None and "TPU compile: skipped" in artifact.report()
    x = mlp_program.example_inputs(seed=3)[0]
    assert np.max(np.abs(artifact.run(*x)[0] - mlp_program.run(*x)[0])) < 1e-5


@pytest.mark.needs_libtpu
def test_batch_rebinds_a_saved_program_when_its_graph_allows(mlp_program, tmp_path):
    artifact = tpuedge.build(mlp_program, "cloud-tpu", tmp_path / "b8", batch=8)
    assert artifact.inputs[0].shape == (8, 32) and artifact.outputs[0].shape == (8, 10)
    assert artifact.manifest["batch"] == {"dimension": 0, "rebound_from": 4, "size": 8}
    x = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    got = artifact.run(x)[0]
    want = np.concatenate([mlp_program.run(x[:4])[0], mlp_program.run(x[4:])[0]])
    assert np.max(np.abs(got - want)) < 1e-5
    # the TPU compile shards the 8 samples over the 4 chips of v5e:2x2
    assert artifact.tpu_compile["programs"]["forward"]["mesh"] == {"data": 4}


def test_batch_of_a_graph_that_bakes_it_in_is_a_clear_user_error():
    from models import build_transformer

    module, inputs = build_transformer()
    program = tpuedge.export(module, inputs, name="transformer")
    with pytest.raises(UserError) as info:
        program.lower("cloud-tpu", batch=8)
    message = str(info.value)
    assert "captured at batch 1" in message and "bakes that size in" in message
    assert "--batch 8" in message and "dynamic_shapes" in message


def test_bad_topology_exits_2_listing_the_valid_ones(tmp_path):
    out = tmp_path / "never"
    code, _, err = run_cli(
        "build",
        f"{EXAMPLES / 'models.py'}:build_mlp",
        "--target",
        "cloud-tpu",
        "--out",
        str(out),
        "--topology",
        "v9:2x2",
    )
    assert code == 2 and not out.exists()
    assert "Unknown TPU topology 'v9:2x2'" in err and "v5e:2x2" in err and "v4:2x2x1" in err and "v6e:2x2" in err


@pytest.mark.needs_libtpu
def test_cli_factory_with_batch_and_train_step(tmp_path):
    """The transformer bakes its batch into a view: from its factory, --batch re-captures the module."""
    out = tmp_path / "transformer"
    code, stdout, err = run_cli(
        "build",
        f"{EXAMPLES / 'models.py'}:build_transformer",
        "--target",
        "cloud-tpu",
        "--out",
        str(out),
        "--batch",
        "8",
        "--train-step",
    )
    assert code == 0, err
    artifact = tpuedge.load(out)
    assert artifact.inputs[0].shape == (8, 16, 64)
    report = artifact.tpu_compile
    train = report["programs"]["train_step"]
    assert train["loss"] == "mse" and train["mesh"] == {"data": 4}
    assert train["collectives"]["total"] >= 1  # the gradient all-reduce over the 4 chips
    assert train["flops_per_device"] > 2 * report["programs"]["forward"]["flops_per_device"]
    assert "train_step" in stdout and "wrote" in stdout


def test_a_dynamic_batch_program_needs_and_takes_batch(tmp_path, monkeypatch):
    import torch
    from models import build_mlp

    monkeypatch.setenv("TPUEDGE_LIBTPU", "off")  # the portable artifacts are what this test is about
    module, _ = build_mlp()
    program = tpuedge.export(module, (torch.randn(2, 32),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    with pytest.raises(UserError, match="symbolic dims .* Pass --batch N"):
        tpuedge.build(program, "cloud-tpu", tmp_path / "unbound")
    assert not (tmp_path / "unbound").exists()
    artifact = tpuedge.build(program, "cloud-tpu", tmp_path / "b16", batch=16)
    x = torch.randn(16, 32)
    with torch.no_grad():
        want = module(x).numpy()
    assert artifact.inputs[0].shape == (16, 32) and np.max(np.abs(artifact.run(x)[0] - want)) < 1e-5
