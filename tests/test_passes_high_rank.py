"""Ops above 5-D done at a lower rank (shared_ir/passes/high_rank.py), and the mcu check's rank
rule for a transpose that stays above 5-D (shared_ir/check.py, edge/mcu/mcu_capability.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.high_rank import ElementwiseAtMost5D, PermuteAtMost5D, reduced_permutation
from tpuedge.shared_ir.program import Program


def test_a_window_partition_is_a_4d_transpose():
    # Swin's (B, H/w, w, W/w, w, C).permute(0, 1, 3, 2, 4, 5): batch 1 dropped, (w, C) merged
    assert reduced_permutation((1, 2, 7, 2, 7, 16), (0, 1, 3, 2, 4, 5)) == ((2, 7, 2, 112), (0, 2, 1, 3))
    assert reduced_permutation((2, 3, 4, 5, 6, 7), (0, 2, 4, 1, 3, 5)) == ((2, 3, 4, 5, 6, 7), (0, 2, 4, 1, 3, 5))


class WindowAttention(torch.nn.Module):
    """Swin-style window partition and merge (6-D permutes) around a Linear and a clamp."""

    def __init__(self, channels: int = 8, window: int = 2):
        super().__init__()
        self.window = window
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.mix = torch.nn.Linear(channels, channels)

    def forward(self, x):
        x = self.conv(x).permute(0, 2, 3, 1)  # B, H, W, C
        b, h, w, c = x.shape
        s = self.window
        windows = x.view(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, s * s, c)
        mixed = self.mix(windows)
        back = mixed.view(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return back.clamp(-1.0, 2.0).mean((1, 2))


def _samples(shape, count, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(shape).astype(np.float32)] for _ in range(count)]


def test_window_partitions_build_for_mcu(tmp_path):
    """Old code: `check --target mcu` passed and the build stopped at TFLite-Micro's TRANSPOSE
    (6-D), exit 2."""
    torch.manual_seed(0)
    program = tpuedge.export(WindowAttention().eval(), (torch.zeros(1, 3, 8, 8),), name="windows")
    ep, result = PermuteAtMost5D()(program.exported_program)
    assert result.changed == 2
    rewritten = Program(ep, name="windows")
    for sample in _samples((1, 3, 8, 8), 3):
        np.testing.assert_array_equal(rewritten.run(*sample)[0], program.run(*sample)[0])
    assert program.check("mcu") == []
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples((1, 3, 8, 8), 40, seed=1))
    assert artifact.manifest["accuracy_budget"]["met"]


class TransposedWindows(torch.nn.Module):
    """HF Swin's form: `.transpose(2, 3)` of the 6-D view; at the last stage a window covers the
    whole map, so only size-1 axes move (a reshape, no TRANSPOSE at all)."""

    def forward(self, x):  # x: (1, 8, 8, 4), windows of 4 then of 8
        small = x.view(1, 2, 4, 2, 4, 4).transpose(2, 3).reshape(-1, 16, 4)
        whole = x.view(1, 1, 8, 1, 8, 4).transpose(2, 3).reshape(-1, 64, 4)
        return small.sum(1) * 2.0 + whole.mean(1)


def test_transposes_above_5d_build_for_mcu(tmp_path):
    """Old code: the build stopped at TFLite-Micro's TRANSPOSE (6-D), exit 2."""
    program = tpuedge.export(TransposedWindows().eval(), (torch.zeros(1, 8, 8, 4),), name="twindows")
    ep, result = PermuteAtMost5D()(program.exported_program)
    assert result.changed == 2
    kinds = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.transpose.int not in kinds and kinds.count(torch.ops.aten.permute.default) == 1
    sample = _samples((1, 8, 8, 4), 1)[0]
    np.testing.assert_array_equal(Program(ep, name="twindows").run(*sample)[0], program.run(*sample)[0])
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples((1, 8, 8, 4), 40, seed=1))
    assert artifact.manifest["accuracy_budget"]["met"]


class HighRankClamps(torch.nn.Module):
    def forward(self, x):  # x: 6-D
        return F.relu(x) + F.relu6(x * 4) + x.clamp(max=0.5) + x.clamp(-0.2, 0.3) + x**2


def test_clamps_above_5d_build_for_android():
    """Old code: litert-torch's converter failed to legalize a 6-D tfl.maximum / minimum / pow
    against a scalar: the build stopped with an internal error."""
    program = tpuedge.export(HighRankClamps().eval(), (torch.zeros(1, 2, 3, 2, 2, 4),), name="clamps6d")
    ep, result = ElementwiseAtMost5D()(program.exported_program)
    assert result.changed == 5  # relu, relu6, both clamps, pow
    sample = _samples((1, 2, 3, 2, 2, 4), 1)[0]
    np.testing.assert_array_equal(Program(ep, name="clamps6d").run(*sample)[0], program.run(*sample)[0])
    artifact = tpuedge.build(program, "android", None, quantize="none")
    np.testing.assert_allclose(artifact.run(*sample)[0], program.run(*sample)[0], rtol=1e-5, atol=1e-5)


class Shuffle6D(torch.nn.Module):
    def forward(self, x):  # every axis moves: no merge of axes brings it to 5-D (Hiera's unroll)
        return x.permute(0, 2, 4, 1, 3, 5) * 2.0, x.permute(5, 3, 1, 4, 0, 2) + 1.0


def test_a_permute_no_merge_brings_to_5d_becomes_swaps_and_builds_for_mcu(tmp_path):
    """Old code: the check named it ("at most 5 dimensions ... here it has 6") and mcu stopped
    there (timm's Hiera). Now each swap of two axes is a 5-D transpose between reshapes."""
    program = tpuedge.export(Shuffle6D().eval(), (torch.zeros(2, 3, 4, 5, 6, 7),), name="shuffle6d")
    ep, result = PermuteAtMost5D()(program.exported_program)
    assert result.changed == 2
    rewritten = Program(ep, name="shuffle6d")
    sample = _samples((2, 3, 4, 5, 6, 7), 1)[0]
    for got, want in zip(rewritten.run(*sample), program.run(*sample)):
        np.testing.assert_array_equal(got, want)
    assert all(
        len(n.meta["val"].shape) <= 5
        for n in ep.graph.nodes
        if n.op == "call_function" and n.target == torch.ops.aten.permute.default
    )
    assert program.check("mcu") == [] and program.check("android") == []
    artifact = tpuedge.build(
        program, "mcu", tmp_path / "mcu", calibration=_samples((2, 3, 4, 5, 6, 7), 24), board="esp32s3"
    )
    assert min(artifact.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"]) >= 0.99


@pytest.mark.parametrize("shape", [(1, 2, 3, 4), (1, 2, 3, 2, 4)])
def test_ops_at_5d_or_less_are_left_alone(shape):
    program = tpuedge.export(HighRankClamps().eval(), (torch.zeros(shape),), name="low")
    for ir_pass in (ElementwiseAtMost5D(), PermuteAtMost5D()):
        ep, result = ir_pass(program.exported_program)
        assert result.changed == 0 and ep is program.exported_program
