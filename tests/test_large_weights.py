"""Weights over 32 MiB quantize per channel: ai-edge-quantizer's chunked path for such tensors
could not broadcast per-channel scales (any axis but the last), and every int8 or dynamic-int8
android build of a model holding one stopped in the quantizer (FCN-ResNet50's head conv)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge


def test_a_convolution_weight_over_32_mib_quantizes_per_channel_as_small_ones_do():
    from ai_edge_quantizer import qtyping
    from ai_edge_quantizer.algorithms.uniform_quantize import uniform_quantize_tensor

    from tpuedge.edge.litert.quantizer_compat import large_weights_sliced

    original = uniform_quantize_tensor.uniform_quantize
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((512, 3, 3, 2048), dtype=np.float32)  # 37.7 MB, as FCN-ResNet50's head
    weight[7] *= 50.0
    scale = (np.abs(weight).reshape(512, -1).max(axis=1) / 127.0).astype(np.float32)
    params = qtyping.UniformQuantParams(
        num_bits=8, quantized_dimension=0, scale=scale, zero_point=np.zeros(512, np.int32), symmetric=True
    )
    with large_weights_sliced():
        got = uniform_quantize_tensor.uniform_quantize(weight, params)
    assert uniform_quantize_tensor.uniform_quantize is original  # installed only while a block runs
    expected = np.clip(np.round(weight / scale[:, None, None, None]), -127, 127)  # per output channel
    assert got.shape == weight.shape and np.array_equal(got.astype(np.float64), expected)


class _WideHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2048, 512, 3, padding=1, bias=False)  # a 37.7 MB float weight

    def forward(self, x):
        return torch.relu(self.conv(x))


def test_a_model_with_a_weight_over_32_mib_builds_for_android_int8(tmp_path):
    """Old code: "ai-edge-quantizer failed while quantizing ... input operand has more dimensions
    than allowed by the axis remapping"."""
    torch.manual_seed(0)
    program = tpuedge.export(_WideHead().eval(), (torch.zeros(1, 2048, 4, 4),), name="wide")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 2048, 4, 4)).astype(np.float32)] for _ in range(8)]
    artifact = tpuedge.build(
        program,
        "android",
        tmp_path / "int8",
        quantize="int8",
        calibration=calibration,
        strict_int8=True,
        allow_below_budget=True,
    )
    size = (tmp_path / "int8" / "model.tflite").stat().st_size
    assert size < 1.1 * 2048 * 512 * 9 + 32 * 1024
    assert artifact.manifest["accuracy"]["cosine"] > 0.999
