"""The one manifest writer (shared_ir/manifest.py): common fields, grouped ops, deterministic JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.manifest import build_manifest, group_repeated, write_build_manifest


def test_repeated_ops_become_op_times_count_in_first_seen_order():
    assert group_repeated(["FC a", "TANH a", "FC a", "FC a", "ADD"]) == ["FC a \u00d73", "TANH a", "ADD"]
    assert group_repeated(["A", "B"]) == ["A", "B"]


def test_writer_fills_common_fields_groups_ops_and_refuses_incomplete(tmp_path):
    class Net(torch.nn.Module):
        def forward(self, x):
            return x + 1

    program = tpuedge.export(Net(), (torch.zeros(1, 2),), name="net")
    (tmp_path / "a.bin").write_bytes(b"abc")
    manifest = build_manifest(
        "toy", program, tmp_path, files=["a.bin"], tools=["numpy"], decisions=[{"ops": ["MUL s", "MUL s", "ADD s"]}]
    )
    written = write_build_manifest(tmp_path, manifest)
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == written and written["decisions"] == [{"ops": ["MUL s \u00d72", "ADD s"]}]
    assert written["files"]["a.bin"]["bytes"] == 3 and written["ir_fingerprint"] == program.fingerprint
    assert set(written["tool_versions"]) >= {"tpuedge", "torch", "numpy"}
    del manifest["files"]
    with pytest.raises(InternalError, match="files"):
        write_build_manifest(tmp_path, manifest)


class _Recurrent(torch.nn.Module):
    """A GRU, which android writes out over time (an LSTM is one fused op there now)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.gru = torch.nn.GRU(4, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.gru(x)[0][:, -1])


def test_an_unrolled_recurrent_layer_lists_each_op_once_with_its_count(tmp_path):
    """An int8 LSTM's recurrent-state group listed every unrolled op one by one."""
    program = tpuedge.export(_Recurrent().eval(), (torch.zeros(1, 12, 4),), name="rnn")
    rng = np.random.default_rng(0)
    cal = [(rng.standard_normal((1, 12, 4)).astype(np.float32),) for _ in range(16)]
    art = tpuedge.build(program, "android", tmp_path / "rnn", quantize="int8", calibration=cal)
    lists = [d["ops"] for d in art.manifest["recipe"]["decisions"]] + [
        d["ops"] for d in art.manifest["recipe"]["non_int8_ops"]
    ]
    assert lists and any("\u00d7" in op for ops in lists for op in ops)
    for ops in lists:
        names = [op.rsplit(" \u00d7", 1)[0] for op in ops]
        assert len(names) == len(set(names)), ops  # each distinct op once
    assert json.loads((art.directory / "manifest.json").read_text()) == art.manifest
