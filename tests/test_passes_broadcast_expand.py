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


def _assert_expands_go_with_the_same_numbers(program, changed: int) -> None:
    ep, result = BroadcastInsteadOfExpand()(program.exported_program)
    assert result.changed == changed
    rewritten = Program(ep, name="x")
    assert not any("expand" in k for k in rewritten.op_histogram)
    x = np.random.default_rng(0).standard_normal(program.inputs[0].shape).astype(np.float32)
    np.testing.assert_array_equal(rewritten.run(x)[0], program.run(x)[0])


def _assert_builds_for_android(program, folder) -> None:
    art = tpuedge.build(program, "android", folder, quantize="none")
    assert art.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"][0] > 0.9999


def test_expands_before_broadcasting_ops_go_with_the_same_numbers():
    _assert_expands_go_with_the_same_numbers(_program(), changed=2)


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
    _assert_builds_for_android(_program(), tmp_path / "a")


class _RelativeLogits(torch.nn.Module):
    """timm's HaloNet relative position logits: each 1-D logit tensor is expanded over the other
    axis, then permuted, and the two are added (5-D)."""

    def __init__(self, block: int = 4, window: int = 6, dim: int = 8):
        super().__init__()
        self.block, self.window, self.dim = block, window, dim
        self.height_rel = torch.nn.Parameter(torch.randn(2 * window - 1, dim) * 0.1)
        self.width_rel = torch.nn.Parameter(torch.randn(2 * window - 1, dim) * 0.1)

    def _rel_logits_1d(self, q, rel_k, order):
        n, h, w, _ = q.shape
        rel = rel_k.shape[0]
        x = (q @ rel_k.transpose(-1, -2)).reshape(-1, w, rel)
        x = F.pad(F.pad(x, [0, 1]).flatten(1), [0, rel - w]).reshape(-1, w + 1, rel)[:, :w, self.window - 1 :]
        return x.reshape(n, h, 1, w, self.window).expand(-1, -1, self.window, -1, -1).permute(order)

    def forward(self, q):
        b, blocks, hw, _ = q.shape
        q = q.reshape(-1, self.block, self.block, self.dim)
        w = self._rel_logits_1d(q, self.width_rel, (0, 1, 3, 2, 4))
        h = self._rel_logits_1d(q.transpose(1, 2), self.height_rel, (0, 3, 1, 4, 2))
        return (h + w).reshape(b, blocks, hw, -1)


def _relative_logits():
    torch.manual_seed(0)
    return tpuedge.export(_RelativeLogits().eval(), (torch.zeros(2, 4, 16, 8),), name="relative_logits")


def test_an_expand_read_through_a_permute_goes_and_the_permute_takes_its_source():
    _assert_expands_go_with_the_same_numbers(_relative_logits(), changed=2)


def test_halonet_style_relative_logits_build_for_android(tmp_path):
    """Old code: "'tfl.add' op operands don't have broadcast-compatible shapes" from the converter."""
    _assert_builds_for_android(_relative_logits(), tmp_path / "a")
