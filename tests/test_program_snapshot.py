"""A .pt2's snapshot in the build cache: the second load of a file reads back the program torch.export's
loader gave (fingerprint, I/O, outputs) without importing torch._dynamo, so an mcu build after an
android build of one .pt2 imports none, and writes what a cold build writes."""

from __future__ import annotations

from pathlib import Path

import models  # examples/models.py
import numpy as np
import pytest
import torch

import tpuedge
from cli_runner import run_cli, run_cli_in_child
from tpuedge.edge.litert.float_model import clear_float_cache
from tpuedge.shared_ir import program_snapshot
from tpuedge.shared_ir.cache import BuildCache
from tpuedge.shared_ir.cache_keys import build_session, read_cache_line
from tpuedge.shared_ir.program import Program


def _load(path: Path) -> tuple[Program, list[str]]:
    """The program and the "program" stage's outcomes of one load."""
    with build_session() as session:
        program = Program.load(path)
    return program, [r.outcome for r in session.stages if r.stage == "program"]


@pytest.mark.parametrize("factory", ["build_mlp", "build_cnn", "build_depthwise", "build_transformer", "build_lstm"])
def test_a_snapshot_reads_back_as_the_program_the_loader_gives(tmp_path, cache_dir, factory):
    module, args = getattr(models, factory)()
    path = tpuedge.export(module, args, name=factory).save(tmp_path / "m.pt2")
    loaded, first = _load(path)
    again, second = _load(path)
    assert (first, second) == (["miss"], ["hit"])
    assert again.fingerprint == loaded.fingerprint
    assert (again.name, again.inputs, again.outputs) == (loaded.name, loaded.inputs, loaded.outputs)
    assert again.parameter_count == loaded.parameter_count and again.op_histogram == loaded.op_histogram
    assert {n.meta["val"].device.type for n in again.exported_program.graph.nodes if n.op == "placeholder"} == {"meta"}
    for sample in loaded.example_inputs(count=2) + [[np.asarray(a) for a in args]]:
        for got, want in zip(again.run(*sample), loaded.run(*sample)):
            np.testing.assert_array_equal(got, want)  # the same graph on the same weights: the same bits


def test_a_snapshot_saves_the_bytes_its_pt2_holds_and_still_verifies(tmp_path, cache_dir):
    """`tpuedge export saved.pt2 -o copy.pt2` writes the same file from a snapshot as from the loader."""
    module, args = models.build_transformer()
    path = tpuedge.export(module, args, name="transformer").save(tmp_path / "t.pt2")
    loaded, _ = _load(path)
    again, outcomes = _load(path)
    assert outcomes == ["hit"]
    again.exported_program.validate()  # skipped only where the snapshot is read (sympy's import)
    assert again.save(tmp_path / "again.pt2").read_bytes() == loaded.save(tmp_path / "loaded.pt2").read_bytes()


def test_fake_values_make_a_snapshot_lowerable_as_a_loaded_program(tmp_path, cache_dir):
    """litert-torch re-traces the program: its float model from a snapshot is the loaded program's."""
    module, args = models.build_cnn()
    path = tpuedge.export(module, args, name="cnn").save(tmp_path / "cnn.pt2")
    loaded, _ = _load(path)
    again, _ = _load(path)
    program_snapshot.with_fake_values(again.exported_program)
    vals = [n.meta["val"] for n in again.exported_program.graph.nodes if "val" in n.meta]
    tensors = [t for v in vals for t in (v if isinstance(v, tuple) else (v,))]  # max_pool2d_with_indices: two
    assert {type(t).__name__ for t in tensors} == {"FakeTensor"} and {t.device.type for t in tensors} == {"cpu"}
    assert again.fingerprint == loaded.fingerprint
    from tpuedge.edge.litert.litert_lowering import lower_to_float_flatbuffer

    assert lower_to_float_flatbuffer(again) == lower_to_float_flatbuffer(loaded)


class _TiedWeights(torch.nn.Module):
    """A language model's output layer reading its embedding's table (one tensor, two names)."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, ids):
        return self.head(self.embedding(ids))


def _dynamic_batch(path: Path) -> Path:
    module, args = models.build_mlp()
    batch = torch.export.Dim("batch", min=1, max=8)
    return tpuedge.export(module, args, name="mlp", dynamic_shapes=({0: batch},)).save(path)


def _tied_weights(path: Path) -> Path:
    return tpuedge.export(_TiedWeights().eval(), (torch.zeros(1, 3, dtype=torch.long),), name="tied").save(path)


@pytest.mark.parametrize("save", [_dynamic_batch, _tied_weights], ids=["dynamic-batch", "tied-weights"])
def test_a_program_the_snapshot_cannot_hold_loads_the_usual_way(tmp_path, cache_dir, save):
    """No entry is stored, and every load reads the .pt2 (tied weights stay one tensor only there)."""
    path = save(tmp_path / "m.pt2")
    assert program_snapshot.encode_if_it_can(Program.load(path)) is None
    loaded, first = _load(path)
    again, second = _load(path)
    assert (first, second) == (["miss"], ["miss"]) and not list(cache_dir.rglob("*.entry"))
    assert again.fingerprint == loaded.fingerprint


def test_a_damaged_snapshot_is_loaded_again_not_served(tmp_path, cache_dir):
    module, args = models.build_cnn()
    path = tpuedge.export(module, args, name="cnn").save(tmp_path / "cnn.pt2")
    loaded, _ = _load(path)
    store = BuildCache(cache_dir)
    (entry,) = [p for p in cache_dir.rglob("*.entry") if store.stage_of(p) == "program"]
    raw = entry.read_bytes()
    entry.write_bytes(raw[:-10] + bytes([raw[-10] ^ 0x40]) + raw[-9:])  # a weight's byte
    again, outcomes = _load(path)
    assert outcomes == ["rebuilt"] and again.fingerprint == loaded.fingerprint
    assert entry.read_bytes() == raw


def _mcu_build_in_child(pt2: Path, calibration: Path, out: Path) -> tuple[str, bool]:
    """(stdout, whether torch._dynamo was imported) of an mcu `tpuedge build` in a fresh process."""
    return run_cli_in_child(
        "build",
        str(pt2),
        "--target",
        "mcu",
        "--calibration",
        str(calibration),
        "--out",
        str(out),
        watch="torch._dynamo",
    )


def test_an_mcu_build_after_android_imports_no_torch_dynamo(tmp_path, cache_dir, monkeypatch):
    """What an mcu build after an android one of the same .pt2 still paid for: torch._dynamo's
    import (by torch.export's loader and ExportedProgram.module()), as long as the rest of it."""
    module, args = models.build_mlp()  # all-int8 meets the search's target: no sensitivity ranking in JAX
    program = tpuedge.export(module, args, name="mlp")
    pt2 = program.save(tmp_path / "mlp.pt2")
    calibration = tmp_path / "cal.npz"
    (spec,) = program.inputs
    np.savez(calibration, **{spec.name: np.random.default_rng(0).standard_normal((24, *spec.shape)).astype(np.float32)})
    clear_float_cache()
    code, _, err = run_cli(
        "build",
        str(pt2),
        "--target",
        "android",
        "--quantize",
        "none",
        "--channels-last",
        "--out",
        str(tmp_path / "android"),
    )
    assert code == 0, err
    stdout, dynamo = _mcu_build_in_child(pt2, calibration, tmp_path / "mcu")
    outcomes = read_cache_line(next(line for line in stdout.splitlines() if line.startswith("cache:")))
    assert {"program", "float_tflite"} <= set(outcomes["hit"])
    assert not dynamo
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "other-cache"))
    _, cold_dynamo = _mcu_build_in_child(pt2, calibration, tmp_path / "mcu-cold")
    assert cold_dynamo  # the cold build reads the .pt2 and lowers it
    files = sorted(p.name for p in (tmp_path / "mcu").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "mcu-cold").iterdir())
    assert all((tmp_path / "mcu" / f).read_bytes() == (tmp_path / "mcu-cold" / f).read_bytes() for f in files)
