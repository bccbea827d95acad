"""A softmax over another axis than the last as one over the last between transposes
(shared_ir/passes/softmax_last_axis.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.softmax_last_axis import SoftmaxOnTheLastAxis
from tpuedge.shared_ir.program import Program


class AttentionPooling(torch.nn.Module):
    """Scores per token ([B, T, 1]) normalized over the tokens (dim 1), as attention pooling and
    HF ConvBERT's dynamic convolution write it; and class probabilities of an NCHW map."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(16, 1)
        self.conv = torch.nn.Conv2d(16, 4, 1)

    def forward(self, x):
        weights = torch.softmax(self.score(x), dim=1)
        pooled = (weights * x).sum(1)
        probs = torch.nn.functional.softmax(self.conv(x.transpose(1, 2).reshape(1, 16, 2, 4)), dim=1)
        return pooled, probs


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 8, 16)).astype(np.float32)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(AttentionPooling().eval(), (torch.from_numpy(_x(0)),), name="attention_pooling")


def test_a_softmax_over_another_axis_moves_to_the_last_exactly():
    program = _program()
    ep, result = SoftmaxOnTheLastAxis()(program.exported_program)
    assert result.changed == 2
    for seed in range(3):
        for ours, theirs in zip(Program(ep, name="moved").run(_x(seed)), program.run(_x(seed))):
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_android_int8_runs_them_as_softmax(tmp_path):
    """Old code: REDUCE_MAX, SUB, EXP, SUM and DIV, left in float by the quantizer."""
    calibration = [[_x(seed)] for seed in range(10, 26)]
    artifact = tpuedge.build(
        _program(), "android", tmp_path / "out", quantize="int8", calibration=calibration, strict_int8=True
    )
    histogram = artifact.manifest["op_histogram"]
    assert histogram.get("SOFTMAX") == 2 and "EXP" not in histogram


def test_mcu_builds_them():
    """Old code: the check passed, the build stopped at the DEQUANTIZEs around the float EXP."""
    assert_mcu_follows_float(_program(), lambda seed: (_x(seed),))


class SpatialSoftmax(torch.nn.Module):
    """A 1x1 convolution's query normalized over its last axis (W), as MobileViTV2's linear
    attention does over the patches, beside attention scores of a matrix product normalized the
    same way ([B, heads, T, T]), which the pass leaves as they are."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Conv2d(8, 1 + 2 * 8, 1)
        self.mix = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        query, key, value = torch.split(self.qkv(x), [1, 8, 8], dim=1)
        scores = torch.softmax(query, dim=-1)  # [B, 1, H, W] over W
        context = (key * scores).sum(-1, keepdim=True)
        out = self.mix(torch.relu(value) * context)
        heads = out.flatten(2).transpose(1, 2).reshape(1, 24, 2, 4).transpose(1, 2)  # [B, 2 heads, 24 tokens, 4]
        attention = torch.softmax(heads @ heads.transpose(-1, -2), dim=-1)  # [B, 2, 24, 24]
        return out, attention


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 8, 4, 6)).astype(np.float32)


def _spatial_program():
    torch.manual_seed(0)
    return tpuedge.export(SpatialSoftmax().eval(), (torch.from_numpy(_image(0)),), name="spatial_softmax")


def test_a_convolutions_softmax_over_its_last_axis_runs_at_3d_exactly_and_attention_scores_stay():
    program = _spatial_program()
    ep, result = SoftmaxOnTheLastAxis()(program.exported_program)
    assert result.changed == 1  # the query's; the attention scores' softmax is left as it was
    softmaxes = [n for n in ep.graph.nodes if n.op == "call_function" and "softmax" in str(n.target)]
    assert sorted(n.meta["val"].dim() for n in softmaxes) == [3, 4]
    for seed in range(3):
        for ours, theirs in zip(Program(ep, name="flat").run(_image(seed)), program.run(_image(seed))):
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_a_convolutions_softmax_over_its_last_axis_builds_for_mcu():
    """Old code: litert-torch's layout pass ran it in NHWC over axis 2, the converter wrote it out
    in REDUCE_MAX, EXP, SUM and DIV, and the build stopped at the DEQUANTIZEs the quantizer left."""
    assert_mcu_follows_float(_spatial_program(), lambda seed: (_image(seed),))


def test_android_int8_runs_a_convolutions_softmax_as_softmax(tmp_path):
    """Old code: EXP and REDUCE_MAX beside one SOFTMAX (the attention scores')."""
    calibration = [[_image(seed)] for seed in range(10, 26)]
    artifact = tpuedge.build(
        _spatial_program(),
        "android",
        tmp_path / "out",
        quantize="int8",
        calibration=calibration,
        strict_int8=True,
        channels_last=True,
    )
    histogram = artifact.manifest["op_histogram"]
    assert histogram.get("SOFTMAX") == 2 and "EXP" not in histogram
