"""A build folder is checked against its manifest whenever it is opened (load, inspect, verify):
every recorded file's sha256 and the IR fingerprint. A swapped model file must not run as the original."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tpuedge
from cli_runner import run_cli
from tpuedge.shared_ir.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MLP = f"{EXAMPLES / 'models.py'}:build_mlp"


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two real android builds of the same program (same IR fingerprint, different .tflite bytes)."""
    work = tmp_path_factory.mktemp("integrity")
    for scheme in ("none", "fp16"):
        code, _, err = run_cli("build", MLP, "--target", "android", "--quantize", scheme, "--out", str(work / scheme))
        assert code == 0, err
    rng = np.random.default_rng(0)
    np.savez(work / "data.npz", x=rng.standard_normal((4, 4, 32)).astype(np.float32))
    np.savez(work / "cal.npz", x=rng.standard_normal((16, 4, 32)).astype(np.float32))
    return work


def _copy(builds: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "art"
    shutil.copytree(builds / "none", folder)
    return folder


def test_an_untouched_build_opens(builds):
    assert tpuedge.load(builds / "none").fingerprint == tpuedge.load(builds / "fp16").fingerprint
    assert tpuedge.load(builds / "none" / "model.tflite").directory == builds / "none"


def test_a_swapped_model_file_is_refused_everywhere(builds, tmp_path):
    folder = _copy(builds, tmp_path)
    shutil.copy(builds / "fp16" / "model.tflite", folder / "model.tflite")  # a valid model of the same IR
    with pytest.raises(UserError, match=r"model.tflite \(sha256 .* the build recorded"):
        tpuedge.load(folder)
    for args in (
        ("inspect", str(folder)),
        ("inspect", str(folder / "model.tflite")),
        ("verify", str(folder), "--model", MLP, "--data", str(builds / "data.npz")),
    ):
        code, _, err = run_cli(*args)
        assert code == 2, (args, err)
        assert "does not hold what its build wrote: model.tflite" in err and "Traceback" not in err


def test_a_missing_file_is_named(builds, tmp_path):
    folder = _copy(builds, tmp_path)
    (folder / "model.tflite").unlink()
    with pytest.raises(UserError, match=r"model.tflite \(missing\)"):
        tpuedge.load(folder)


@pytest.mark.parametrize("edit", ["drop", "empty"])
def test_a_manifest_without_fingerprint_is_refused(builds, tmp_path, edit):
    folder = _copy(builds, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    if edit == "drop":
        del manifest["ir_fingerprint"]
    else:
        manifest["ir_fingerprint"] = None
    (folder / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_cli("inspect", str(folder))
    assert code == 2 and "records no IR fingerprint" in err, err
    with pytest.raises(UserError, match="records no IR fingerprint"):
        tpuedge.load(folder)


def test_a_manifest_without_file_hashes_is_refused(builds, tmp_path):
    folder = _copy(builds, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="lists no files with their sha256"):
        tpuedge.load(folder)


def test_a_bare_tflite_says_it_has_no_manifest(builds, tmp_path):
    bare = tmp_path / "somebody_elses.tflite"
    shutil.copy(builds / "none" / "model.tflite", bare)
    code, out, err = run_cli("inspect", str(bare))
    assert code == 0, err
    assert "a .tflite without a tpuedge manifest (target and IR unknown)" in out
    assert "target android" not in out


def test_a_tflite_of_an_mcu_build_is_opened_by_mcu(builds, tmp_path):
    """Files are opened by the target that made them, read from the manifest (not "android" for every .tflite)."""
    out_dir = tmp_path / "mcu"
    code, _, err = run_cli(
        "build",
        MLP,
        "--target",
        "mcu",
        "--calibration",
        str(builds / "cal.npz"),
        "--eval",
        "none",
        "--out",
        str(out_dir),
    )
    assert code == 0, err
    code, out, err = run_cli("inspect", str(out_dir / "model.tflite"))
    assert code == 0, err
    assert out.startswith("mcu build of mlp") and "target android" not in out
    assert type(tpuedge.load(out_dir / "model.tflite")).__name__ == "McuArtifact"


def test_a_files_hash_is_read_a_block_at_a_time(tmp_path):
    """The manifest's sha256 of a model file: old code read the whole file at once, one more copy
    of the model at the build's end (a 434 MB float BERT-base: the build's peak memory)."""
    import hashlib
    import tracemalloc

    from tpuedge.shared_ir.artifact import file_entry

    data = np.random.default_rng(0).integers(0, 256, 48 << 20, dtype=np.uint8).tobytes()
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        entry = file_entry(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert peak < 8 << 20, f"hashing a 48 MiB file held {peak / 2**20:.1f} MiB"
