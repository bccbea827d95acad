"""Tensor.unfold (sliding windows) as one gather of constant positions: the same numbers in the
IR, and models that unfold a map twice (patches, HaloNet's halos) build for android, where
litert-torch's own form is a PAD above 5-D that the converter refuses, and for mcu, which had no
lowering for it (up to 5-D: TFLite-Micro's TRANSPOSE refuses 6-D tensors, and says so)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.unfold_gather import UnfoldAsGather
from tpuedge.shared_ir.program import Program


class _Patches(torch.nn.Module):
    """Overlapping 4x4 windows every 2 pixels, as HaloNet cuts its halos, then a linear mix."""

    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Linear(16, 4)

    def forward(self, x):  # (1, 3, 8, 8)
        windows = x.unfold(2, 4, 2).unfold(3, 4, 2)  # (1, 3, 3, 3, 4, 4): 6-D
        return self.mix(windows.reshape(1, 3, 9, 16)).mean(1)


class _Rows(torch.nn.Module):
    """Windows of 4 rows every 2: 5-D, what TFLite-Micro's TRANSPOSE still takes (6-D it refuses)."""

    def forward(self, x):  # (1, 3, 8, 8)
        return x.unfold(2, 4, 2).mean(-1) * 2.0


class _Frames(torch.nn.Module):
    def forward(self, x):  # (2, 20) -> frames of 6 every 3, and of 5 every 5 on the last axis
        return x.unfold(1, 6, 3).sum(-1), x.unfold(-1, 5, 5)


def test_windows_are_torchs_own():
    for module, example in ((_Patches(), torch.zeros(1, 3, 8, 8)), (_Frames(), torch.zeros(2, 20))):
        torch.manual_seed(0)
        program = tpuedge.export(module.eval(), (example,), name="unfold")
        ep, result = UnfoldAsGather()(program.exported_program)
        rewritten = Program(ep, name="gathered")
        assert result.changed and "aten.unfold.default" not in rewritten.op_histogram
        x = np.random.default_rng(0).standard_normal(tuple(example.shape)).astype(np.float32)
        for want, got in zip(program.run(x), rewritten.run(x), strict=True):
            np.testing.assert_array_equal(got, want)


def test_unfolded_maps_build_for_android_and_mcu(tmp_path):
    torch.manual_seed(0)
    patches = tpuedge.export(_Patches().eval(), (torch.zeros(1, 3, 8, 8),), name="patches")
    android = tpuedge.build(patches, "android", tmp_path / "android", quantize="none")
    assert android.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"][0] > 0.9999
    rows = tpuedge.export(_Rows().eval(), (torch.zeros(1, 3, 8, 8),), name="rows")
    assert not rows.check("mcu") and not patches.check("mcu")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(16)]
    mcu = tpuedge.build(rows, "mcu", tmp_path / "mcu", calibration=calibration, board="esp32s3")
    assert mcu.manifest["accuracy_budget"]["met"]
