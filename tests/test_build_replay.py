"""Whole-build replay: a build from a saved .pt2 with file data is remembered by those bytes and
replayed, byte for byte, without importing torch; anything not a file is never replayed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import tpuedge
from cli_runner import run_cli, run_cli_in_child
from tpuedge.build_replay import replay_key
from tpuedge.shared_ir.cache import BuildCache

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def saved(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TPUEDGE_NO_CACHE", raising=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    pt2 = tpuedge.export(model, (torch.zeros(1, 8),), name="mlp").save(tmp_path / "mlp.pt2")
    calibration = tmp_path / "cal.npz"
    np.savez(calibration, np.random.default_rng(0).normal(size=(40, 1, 8)).astype(np.float32))
    return pt2, calibration


def _folder(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _build_in_child(pt2: Path, calibration: Path, out: Path) -> tuple[str, bool]:
    """(stdout, whether torch was imported) of `tpuedge build` in a fresh process."""
    return run_cli_in_child(
        "build", str(pt2), "--target", "mcu", "--calibration", str(calibration), "--out", str(out), watch="torch"
    )


def test_rebuild_from_a_saved_program_replays_without_torch(saved, tmp_path):
    pt2, calibration = saved
    cold, cold_torch = _build_in_child(pt2, calibration, tmp_path / "cold")
    warm, warm_torch = _build_in_child(pt2, calibration, tmp_path / "warm")
    assert "cache: hit build" not in cold and cold_torch
    assert "cache: hit build" in warm and not warm_torch
    assert _folder(tmp_path / "warm") == _folder(tmp_path / "cold")
    assert str(tmp_path / "warm") in warm and str(tmp_path / "cold") not in warm  # its own folder in the report


def test_changed_data_or_code_data_is_not_replayed(saved, tmp_path):
    pt2, calibration = saved
    options = {"calibration": str(calibration), "board": None}
    key = replay_key(str(pt2), "mcu", options)
    assert key and key == replay_key(str(pt2), "mcu", dict(options))
    np.savez(calibration, np.random.default_rng(1).normal(size=(40, 1, 8)).astype(np.float32))
    assert replay_key(str(pt2), "mcu", options) != key
    assert replay_key(str(pt2), "mcu", {"calibration": "examples/digits/model.py:calibration"}) is None
    assert replay_key(f"{ROOT}/examples/models.py:build_mlp", "mcu", {}) is None


def test_a_damaged_replay_entry_is_rebuilt(saved, tmp_path):
    pt2, calibration = saved
    args = ("build", str(pt2), "--target", "mcu", "--calibration", str(calibration))
    assert run_cli(*args, "--out", str(tmp_path / "a"))[0] == 0
    store = BuildCache.default()
    entries = [p for p in store.directory.rglob("*") if p.is_file() and store.stage_of(p) == "build"]
    assert len(entries) == 1
    entries[0].write_bytes(entries[0].read_bytes()[:-10])  # truncated
    code, out, _ = run_cli(*args, "--out", str(tmp_path / "b"))
    assert code == 0 and "cache: hit build" not in out
    assert _folder(tmp_path / "b") == _folder(tmp_path / "a")
