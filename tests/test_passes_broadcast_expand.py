"""The broadcast-instead-of-expand pass: an expand that only feeds broadcasting elementwise ops
is dropped (exact), which litert-torch's converter needs for MobileViTv2's linear attention."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.broadcast_expand import BroadcastInsteadOfExpand
from tpuedge.shared_ir.program import Program


class _LinearAttention(torch.nn.Module):
    """timm's MobileViTv2 LinearSelfAttention, its shapes: [B, d, P, N] values, [B, 1, P, N] scores."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.qkv = torch.nn.Conv2d(dim, 1 + 2 * dim, 1)
        self.out = torch.nn.Conv2d(dim, dim, 1)
        self.dim = dim

    def forward(self, x):
        query, key, value = self.qkv(x).split([1, self.dim, self.dim], dim=1)
        context = (key * F.softmax(query, dim=-1)).sum(dim=-1, keepdim=True)
        kept = x * context.expand(-1, -1, -1, x.shape[-1])  # expand, not expand_as: dropped too
        return self.out(F.relu(value) * context.expand_as(value)) + kept.mean()


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_LinearAttention().eval(), (torch.zeros(1, 8, 4, 16),), name="linear_attention")


def test_expands_before_broadcasting_ops_go_with_the_same_numbers():
    program = _program()
    ep, result = BroadcastInsteadOfExpand()(program.exported_program)
    assert result.changed == 2
    assert not any("expand" in k for k in Program(ep, name="x").op_histogram)
    x = np.random.default_rng(0).standard_normal((1, 8, 4, 16)).astype(np.float32)
    np.testing.assert_array_equal(Program(ep, name="x").run(x)[0], program.run(x)[0])


def test_an_expand_that_sets_the_output_shape_stays():
    """x.expand(4, 8) + 1.0: without the expand the sum would be [1, 8] (the bug the mcu op probes
    caught in the first form of this pass, which checked only the user's own recorded shape)."""

    class Widen(torch.nn.Module):
        def forward(self, x, y):
            return x.expand(4, 8) + 1.0, y * x.expand(4, 8)

    program = tpuedge.export(Widen(), (torch.zeros(1, 8), torch.zeros(4, 8)), name="widen")
    ep, result = BroadcastInsteadOfExpand()(program.exported_program)
    assert result.changed == 1  # only the one whose other operand broadcasts back to [4, 8]
    x, y = np.arange(8, dtype=np.float32)[None], np.ones((4, 8), np.float32)
    for want, got in zip(program.run(x, y), Program(ep, name="widen").run(x, y)):
        np.testing.assert_array_equal(got, want)


def test_mobilevit_v2_style_attention_builds_for_android(tmp_path):
    """Old code: litert-torch's converter passes refused it ("'tfl.mul' op operands don't have
    broadcast-compatible shapes"), an InternalError out of the build."""
    art = tpuedge.build(_program(), "android", tmp_path / "a", quantize="none")
    assert art.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"][0] > 0.9999
