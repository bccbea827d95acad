"""A strided convolution over few input channels with a long kernel is lowered for XLA:TPU as
the same sums over a space-to-depth view (cloud/lowerings/tpu_conv.py); other platforms keep it."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
import torch
from jax import lax

import tpuedge
from tpuedge.cloud.lowerings.tpu_conv import folds_for_tpu, space_to_depth_conv

CASES = [  # x, weight, stride, padding
    ((2, 1, 1024, 1), (32, 1, 512, 1), (4, 1), (254, 0)),  # torchcrepe's first layer, fewer filters
    ((1, 1, 640), (16, 1, 256), (128,), (0,)),  # an STFT as a convolution (silero-vad)
    ((3, 2, 100), (5, 2, 32), (4,), (3,)),
    ((2, 1, 64, 48), (3, 1, 16, 32), (4, 8), (2, 5)),  # both axes folded
    ((1, 3, 37, 50), (4, 3, 16, 5), (2, 1), (1, 2)),  # one axis folded, the other strided as written
]


@pytest.mark.parametrize("x_shape, w_shape, stride, padding", CASES)
def test_the_folded_convolution_gives_the_convolutions_values(x_shape, w_shape, stride, padding):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    n = len(w_shape) - 2
    sp = "DHW"[3 - n :]
    dims = lax.conv_dimension_numbers(x_shape, w_shape, ("NC" + sp, "OI" + sp, "NC" + sp))
    expected = lax.conv_general_dilated(x, w, stride, [(p, p) for p in padding], dimension_numbers=dims)
    folds = folds_for_tpu(w_shape, stride, (1,) * n, 1)
    got = space_to_depth_conv(x, w, stride, padding, folds)
    assert got.shape == expected.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=0, atol=2e-6 * float(np.abs(expected).max()))


def test_only_long_strided_kernels_over_few_channels_fold():
    assert folds_for_tpu((128, 1, 512, 1), (4, 1), (1, 1), 1) == (True, False)
    assert folds_for_tpu((128, 64, 512), (4,), (1,), 1) is None  # many channels: the MXU's usual shape
    assert folds_for_tpu((128, 1, 512), (1,), (1,), 1) is None  # no stride to fold by
    assert folds_for_tpu((128, 1, 10), (5,), (1,), 1) is None  # a short kernel compiles fast as it is
    assert folds_for_tpu((128, 1, 30), (4,), (1,), 1) is None  # not a multiple of the stride
    assert folds_for_tpu((128, 1, 512), (4,), (2,), 1) is None and folds_for_tpu((4, 1, 512), (4,), (1,), 4) is None


class WaveformFrontEnd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 32, 256, stride=64)

    def forward(self, x):
        return torch.relu(self.conv(x))


def _convolutions(text: str) -> list[str]:
    return [line for line in text.splitlines() if "stablehlo.convolution" in line]


def test_the_tpu_program_folds_the_convolution_and_the_cpu_program_keeps_it():
    torch.manual_seed(0)
    program = tpuedge.export(WaveformFrontEnd().eval(), (torch.zeros(2, 1, 1024),), name="frontend")
    lowered = program.lower("cloud-tpu")
    export = lowered.forward_export
    traced = jax.jit(export.function).trace(*export.abstract_arguments())
    tpu, cpu = (_convolutions(traced.lower(lowering_platforms=(p,)).as_text()) for p in ("tpu", "cpu"))
    assert len(tpu) == len(cpu) == 1
    assert re.search(r"tensor<2x64x\d+xf32>, tensor<32x64x4xf32>", tpu[0]), tpu[0]  # 64 channels of 4 taps, stride 1
    assert "stride = [1]" in tpu[0]
    assert re.search(r"tensor<2x1x1024xf32>, tensor<32x1x256xf32>", cpu[0]) and "stride = [64]" in cpu[0], cpu[0]
    # the portable artifact runs the convolution as written on XLA:CPU: Program.run's numbers
    x = np.random.default_rng(1).standard_normal((2, 1, 1024)).astype(np.float32)
    expected = program.run(x)[0]
    got = np.asarray(export.function(export.params, export.buffers, x)[0])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # and gradients flow through the platform switch (the train step differentiates it)
    grad = jax.grad(lambda p: export.function(p, export.buffers, x)[0].sum())(export.params)
    assert float(np.abs(np.asarray(grad["conv.weight"])).sum()) > 0
