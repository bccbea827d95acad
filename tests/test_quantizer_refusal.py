"""A model whose float .tflite ai-edge-quantizer cannot quantize (edge/litert/quantizer_refusal.py): a
dilated 3-D max pool lowers to STABLEHLO_REDUCE_WINDOW, whose window body the quantizer's
calibration never runs ("MAXIMUM not found in tensor_name_to_qsv"). Old code: an internal error
with a traceback, under `--quantize auto` (the default) as well as `--quantize int8`. Now: int8 is a
user error (exit 2) naming the op and its scope, nothing written; auto leaves int8 out and says so."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.errors import EXIT_USER_ERROR, UserError


class _DilatedVideoPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        pooled = F.max_pool3d(torch.relu(self.conv(x)), 3, 1, 1, dilation=2)  # no 2-D form: REDUCE_WINDOW
        return self.head(pooled.mean((2, 3, 4)))


@pytest.fixture(scope="module")
def video():
    torch.manual_seed(0)
    program = tpuedge.export(_DilatedVideoPool().eval(), (torch.randn(1, 2, 6, 8, 8),), name="dilated_video")
    calibration = [[s] for s in np.random.default_rng(0).standard_normal((24, 1, 2, 6, 8, 8)).astype(np.float32)]
    return program, calibration


def test_int8_the_quantizer_cannot_take_is_a_user_error_naming_the_op(video, tmp_path):
    program, calibration = video
    out = tmp_path / "android"
    with pytest.raises(UserError) as caught:
        tpuedge.build(program, "android", out, quantize="int8", calibration=calibration)
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_USER_ERROR
    assert "STABLEHLO_REDUCE_WINDOW x1" in message and "dilated_video" in message
    assert "--quantize dynamic-int8" in message and "nothing was written" in message
    assert not out.exists()


def test_auto_leaves_out_the_scheme_the_quantizer_cannot_take(video, tmp_path):
    program, calibration = video
    artifact = tpuedge.build(program, "android", tmp_path / "auto", quantize="auto", calibration=calibration)
    auto = json.loads((tmp_path / "auto" / "manifest.json").read_text())["recipe"]["auto"]
    assert "int8" in auto["not_quantized"] and "STABLEHLO_REDUCE_WINDOW" in auto["not_quantized"]["int8"]
    assert auto["chosen"] != "int8" and {c["scheme"] for c in auto["candidates"]} >= {"dynamic-int8", "none"}
    x = calibration[-1]
    reference = program.run(*x)[0]
    got = artifact.run(*x)[0]
    assert np.allclose(got, reference, atol=0.05 * np.abs(reference).max() + 1e-3)
