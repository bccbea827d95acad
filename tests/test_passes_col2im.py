"""F.fold (col2im: VOLO's outlooker) as sums of placed taps: the mcu check refused it
(TFLite-Micro has no col2im); the rewrite gives torch's numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.col2im_sums import Col2imAsSums
from tpuedge.shared_ir.program import Program

from mcu_rewrite_helpers import assert_builds_for_mcu_within_budget


class _Outlook(torch.nn.Module):
    """Patches out, weighted, folded back: VOLO's outlook attention in small."""

    def __init__(self, kernel=3, stride=2, padding=1, dilation=1, side=8):
        super().__init__()
        self.geometry = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation)
        self.side = side
        self.conv = torch.nn.Conv2d(2, 2, 1)

    def forward(self, x):
        cols = F.unfold(x, **self.geometry)
        return self.conv(F.fold(cols * torch.sigmoid(cols), (self.side, self.side), **self.geometry))


@pytest.mark.parametrize(
    "geometry",
    [
        dict(kernel=3, stride=2, padding=1),
        dict(kernel=3, stride=1, padding=1, side=7),
        dict(kernel=2, stride=2, padding=0),
        dict(kernel=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1), side=9),
    ],
)
def test_fold_becomes_sums_of_placed_taps_with_the_same_numbers(geometry):
    side = geometry.get("side", 8)
    program = tpuedge.export(_Outlook(**geometry).eval(), (torch.zeros(1, 2, side, side),), name="outlook")
    ep, result = Col2imAsSums()(program.exported_program)
    assert result.changed == 1
    assert "aten.col2im.default" not in Program(ep, name="outlook").op_histogram
    x = np.random.default_rng(0).standard_normal((1, 2, side, side)).astype(np.float32)
    np.testing.assert_allclose(Program(ep, name="outlook").run(x)[0], program.run(x)[0], rtol=1e-6, atol=1e-6)
    assert program.check("mcu") == []  # old code: aten.col2im.default (and aten.im2col.default)


def test_an_outlook_block_runs_in_tflite_micro_within_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_Outlook().eval(), (torch.zeros(1, 2, 8, 8),), name="outlook")
    assert_builds_for_mcu_within_budget(program, (1, 2, 8, 8), {"col2im-as-sums", "im2col-as-conv"}, tmp_path / "mcu")


def test_a_fold_whose_patches_tile_the_image_is_a_rearrangement_and_runs_on_android(tmp_path):
    """HF MobileViTV2 unfolds its feature map into 2x2 patches and folds them back. litert-torch
    lowered the fold to a STABLEHLO_SCATTER that LiteRT refused to prepare ("Only update, Add,
    Multiply, Maximum and Minimum operations are currently supported"): android did not run this
    pass, and every android build of the model crashed there."""
    torch.manual_seed(0)
    program = tpuedge.export(_Outlook(kernel=2, stride=2, padding=0).eval(), (torch.zeros(1, 2, 8, 8),), name="tiles")
    ep, result = Col2imAsSums()(program.exported_program)
    ops = Program(ep, name="tiles").op_histogram
    assert result.changed == 1 and "aten.col2im.default" not in ops
    assert "aten.add.Tensor" not in ops and "aten.constant_pad_nd.default" not in ops  # no sums: a permute
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(Program(ep, name="tiles").run(x)[0], program.run(x)[0])
    artifact = tpuedge.build(program, "android", tmp_path / "android", quantize="none")
    np.testing.assert_allclose(artifact.run(x)[0], program.run(x)[0], rtol=1e-5, atol=1e-5)


def test_a_float_model_litert_refuses_is_a_user_error_naming_the_node(tmp_path):
    """A fold the pass leaves (an 8x8 kernel: 64 taps) reaches LiteRT as the SCATTER it refuses.
    Old code answered a float build as if an int8 kernel had refused a value: a BudgetError
    (exit 1) saying "An int8 kernel refused its values (a DIV whose divisor rounds to its zero
    point)" and suggesting calibration data, none of which a float model has."""
    from tpuedge.shared_ir.errors import BudgetError, UserError

    torch.manual_seed(0)
    program = tpuedge.export(
        _Outlook(kernel=8, stride=4, padding=0, side=16).eval(), (torch.zeros(1, 2, 16, 16),), name="wide"
    )
    out = tmp_path / "android"
    with pytest.raises(UserError) as raised:
        tpuedge.build(program, "android", out, quantize="none")
    text = str(raised.value)
    assert not isinstance(raised.value, BudgetError) and raised.value.exit_code == 2
    assert "STABLEHLO_SCATTER" in text and "int8" not in text and "calibration" not in text, text
    assert not out.exists()
