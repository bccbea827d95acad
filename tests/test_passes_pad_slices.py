"""Reflect/replicate/circular padding as slices + concatenation: exact in float, and a
reflect-padded CNN builds for mcu and runs in TFLite-Micro (which has no SELECT kernel)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.explicit_pad import ExplicitPad
from tpuedge.edge.mcu.tflm_ops import tflm_ops
from tpuedge.shared_ir.passes.pad_slices import PadAsSlices
from tpuedge.shared_ir.program import Program

TFLM_MAX_CONCAT_INPUTS = tflm_ops()["CONCATENATION"]["max_inputs"]


class _Pad(torch.nn.Module):
    def __init__(self, mode, pad):
        super().__init__()
        self.mode, self.pad = mode, pad

    def forward(self, x):
        return F.pad(x, self.pad, mode=self.mode)


@pytest.mark.parametrize(
    "mode, pad, shape",
    [
        ("reflect", (2, 1, 3, 0), (1, 2, 5, 6)),
        ("replicate", (1, 2, 2, 1), (1, 2, 5, 6)),
        ("circular", (2, 1, 1, 3), (1, 2, 5, 6)),
        ("reflect", (3, 2), (2, 3, 7)),
    ],
)
def test_padding_becomes_slices_and_cat_with_identical_values(mode, pad, shape):
    program = tpuedge.export(_Pad(mode, pad), (torch.zeros(shape),), name="pad")
    ep, results = PassManager([ExplicitPad(), PadAsSlices(max_concat_inputs=TFLM_MAX_CONCAT_INPUTS)]).run(
        program.exported_program
    )
    rewritten = Program(ep, name="pad")
    assert results[1].changed == 1 and results[1].details["modes"] == {mode: 1}
    assert set(rewritten.op_histogram) == {"aten.slice.Tensor", "aten.cat.default"}
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(program.run(x)[0], rewritten.run(x)[0])


class _ReflectNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3)
        self.conv2 = torch.nn.Conv2d(8, 8, 3)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.conv1(F.pad(x, (1, 1, 1, 1), mode="reflect")))
        y = torch.relu(self.conv2(F.pad(y, (2, 2, 2, 2), mode="reflect")))
        return self.fc(y.mean(dim=(2, 3)))


def test_reflect_padded_cnn_builds_for_mcu_and_matches_float_in_tflm(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_ReflectNet().eval(), (torch.zeros(1, 1, 8, 8),), name="reflect")
    assert program.check("mcu") == []
    rng = np.random.default_rng(0)
    cal = [(rng.standard_normal((1, 1, 8, 8)).astype(np.float32),) for _ in range(32)]
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    ops = {o["op"] for o in art.manifest["tflm_ops"]}
    assert "SELECT" not in ops and "GATHER_ND" not in ops and "CONCATENATION" in ops
    pads = [r for r in art.manifest["rewrites"] if r["pass"] == "pad-as-slices"]
    assert pads and pads[0]["accuracy_cost_vs_original_float"]["max_abs_error"] == 0  # exact in float
    # TFLM vs the float IR on fresh inputs, input-dependent part (outputs centered on their mean)
    test = [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(32)]
    ref = np.stack([program.run(t)[0] for t in test])
    got = np.stack([art.run(t.transpose(0, 2, 3, 1))[0] for t in test])  # mcu takes NHWC images
    center = ref.mean(0)
    ref, got = (ref - center).ravel(), (got - center).ravel()
    cos = float(ref @ got / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cos > 0.98, cos


def test_a_pad_wider_than_tflms_concatenation_is_a_slice_times_a_selection_per_border(tmp_path):
    """silero-vad reflects 64 samples. As one-wide slices that is one CONCATENATION of 65
    inputs, which TFLite-Micro refuses (at most 10): each border of a dim padded that wide is one
    slice times a constant 0/1 matrix (FULLY_CONNECTED, which TFLite-Micro runs in 16 bits; the
    GATHER_ND this was before runs in 8 only), around the input in one 3-input CONCATENATION."""

    class WidePad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(1, 4, 9, stride=4)

        def forward(self, x):
            return self.conv(F.pad(x, (24, 24), mode="reflect"))

    torch.manual_seed(0)
    program = tpuedge.export(WidePad().eval(), (torch.zeros(1, 1, 64),), name="wide_pad")
    rewritten, result = PadAsSlices(max_concat_inputs=TFLM_MAX_CONCAT_INPUTS)(
        ExplicitPad()(program.exported_program)[0]
    )
    x = torch.randn(1, 1, 64)
    torch.testing.assert_close(rewritten.module()(x)[0], program.exported_program.module()(x)[0], rtol=0, atol=0)
    rng = np.random.default_rng(0)
    cal = [[x] for x in rng.standard_normal((40, 1, 1, 64)).astype(np.float32)]
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    ops = {o["op"] for o in art.manifest["tflm_ops"]}
    assert "GATHER_ND" not in ops and {"CONCATENATION", "FULLY_CONNECTED"} <= ops and "SELECT" not in ops
    assert result.changed == 1 and "aten.index.Tensor" not in Program(rewritten, name="p").op_histogram
    test = rng.standard_normal((32, 1, 1, 64)).astype(np.float32)
    ref = np.stack([program.run(t)[0] for t in test]).ravel()
    got = np.stack([art.run(t)[0] for t in test]).ravel()
    assert float(ref @ got / np.linalg.norm(ref) / np.linalg.norm(got)) > 0.99


def test_a_concatenation_of_more_than_ten_tensors_says_so(tmp_path):
    """A torch.cat of 12 tensors is one CONCATENATION of 12 inputs, which TFLite-Micro refuses:
    the check names that limit, the source line and the way out before converting, and nothing
    is written."""
    from tpuedge.shared_ir.errors import UserError

    class WideCat(torch.nn.Module):
        def forward(self, x):
            return torch.cat([x * (i + 1) for i in range(12)], dim=1)

    program = tpuedge.export(WideCat().eval(), (torch.zeros(1, 4),), name="wide_cat")
    cal = [[x] for x in np.random.default_rng(0).standard_normal((40, 1, 4)).astype(np.float32)]
    with pytest.raises(UserError, match=r"at most 10 input tensors \(TFLite-Micro's CONCATENATION.*join at most 10"):
        tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    assert not (tmp_path / "mcu").exists()


@pytest.mark.parametrize(
    "mode, pad, shape",
    [
        ("reflect", (0, 0, 12, 3), (1, 2, 16, 5)),  # a wide pad of a dim that is not the last
        ("replicate", (11, 0), (2, 3, 7)),
        ("circular", (6, 6), (1, 2, 16)),
    ],
)
def test_wide_padding_is_exact_in_every_mode_and_dim(mode, pad, shape):
    program = tpuedge.export(_Pad(mode, pad), (torch.zeros(shape),), name="pad")
    ep, results = PassManager([ExplicitPad(), PadAsSlices(max_concat_inputs=TFLM_MAX_CONCAT_INPUTS)]).run(
        program.exported_program
    )
    rewritten = Program(ep, name="pad")
    assert results[1].changed == 1 and "aten.index.Tensor" not in rewritten.op_histogram
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(program.run(x)[0], rewritten.run(x)[0])
