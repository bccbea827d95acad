"""repeat-as-expand: `x.repeat(...)` as view, expand and reshape, exact; a U-Net whose pooled gate
is repeated over the image and added to it converts for android (litert-torch's layout pass had
moved the repeat to NHWC with its counts in NCHW order, and the add failed in its converter);
a converter failure on a program the check passed is one paragraph naming the IR node and the
model line, exit 2, nothing written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.repeat_expand import RepeatAsExpand
from tpuedge.shared_ir.program import Program


class _Repeats(torch.nn.Module):
    def forward(self, x, g):
        a = g.repeat(1, 1, 4, 4)  # size-1 dims: an expand
        b = x.repeat(1, 2, 1, 3)  # longer dims: tiles, in order
        c = g[0].repeat(2, 1, 1, 1)  # a new leading dim
        return a + x, b, c


def test_repeat_becomes_view_expand_reshape_exactly():
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((1, 3, 4, 4)).astype(np.float32), rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    program = tpuedge.export(_Repeats(), (torch.from_numpy(x), torch.from_numpy(g)), name="repeats")
    ep, result = RepeatAsExpand()(program.exported_program)
    assert result.changed == 3
    rewritten = Program(ep, name="repeats")
    assert "aten.repeat.default" not in rewritten.op_histogram and rewritten.op_histogram["aten.expand.default"] == 3
    for got, want in zip(rewritten.run(x, g), program.run(x, g)):
        np.testing.assert_array_equal(got, want)


class _Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.q, self.k, self.v = torch.nn.Conv2d(c, c // 2, 1), torch.nn.Conv2d(c, c // 2, 1), torch.nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q = self.q(x).view(b, -1, h * w).permute(0, 2, 1)
        attn = F.softmax(torch.bmm(q, self.k(x).view(b, -1, h * w)), dim=-1)
        return torch.bmm(self.v(x).view(b, c, h * w), attn.permute(0, 2, 1)).view(b, c, h, w) * 0.5 + x


class _GatedUNet(torch.nn.Module):
    """Down, self-attention at the bottom, up, skip; a gate pooled from the map, repeated over
    the image, added to it."""

    def __init__(self, c=8):
        super().__init__()
        self.down1 = torch.nn.Conv2d(1, c, 3, padding=1)
        self.down2 = torch.nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.attn = _Attention(2 * c)
        self.up = torch.nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.gate = torch.nn.Linear(c, c)
        self.head = torch.nn.Conv2d(c, 1, 1)

    def forward(self, x):
        x1 = F.relu(self.down1(x))
        x = F.relu(self.up(self.attn(F.relu(self.down2(x1))))) + x1
        x3 = torch.sigmoid(self.gate(x.mean((2, 3))))[:, :, None, None].repeat(1, 1, x.shape[2], x.shape[3])
        x = x + x3
        return self.head(x)


def _unet(name):
    torch.manual_seed(0)
    return tpuedge.export(_GatedUNet().eval(), (torch.zeros(1, 1, 16, 16),), name=name)


def _samples(n=8):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((1, 1, 16, 16)).astype(np.float32),) for _ in range(n)]


def test_android_converts_a_unet_whose_repeated_gate_feeds_a_residual_add(tmp_path):
    program = _unet("gated_unet")
    art = tpuedge.build(program, "android", tmp_path / "android", quantize="none")
    for (x,) in _samples(4):
        np.testing.assert_allclose(art.run(x)[0], program.run(x)[0], atol=1e-5)


@pytest.mark.slow  # two quantized builds: about 50 s on 2 busy cores
@pytest.mark.parametrize("scheme", ["dynamic-int8", "int8"])
def test_android_int8_schemes_convert_the_unet_within_budget(tmp_path, scheme):
    """A gated U-Net whose repeats litert-torch moves to NHWC: each quantized scheme builds, its
    budget measured."""
    program = _unet(f"gated_unet_{scheme}")
    art = tpuedge.build(program, "android", tmp_path / "android", quantize=scheme, calibration=_samples(32))
    budget = art.manifest["accuracy_budget"]
    assert budget["met"] and min(budget["measured"]["sample_cosine_per_output"]) >= 0.99


class _NoOp:
    name = "repeat-as-expand"

    def __call__(self, exported_program):
        from tpuedge.shared_ir.passes import PassResult

        return exported_program, PassResult(self.name, 0, "left out by the test")


def test_a_converter_failure_is_one_paragraph_naming_the_ir_node(tmp_path, monkeypatch):
    """Without the pass, litert-torch fails inside its own re-trace: the error names the add and
    this file's line, exit 2, and the output folder is not made."""
    import tpuedge.shared_ir.passes.repeat_expand as repeat_expand
    from tpuedge.edge.litert.float_model import clear_float_cache
    from tpuedge.shared_ir.errors import UserError

    monkeypatch.setattr(repeat_expand, "RepeatAsExpand", _NoOp)
    clear_float_cache()  # a float model of the same IR, made with the pass, is not this lowering's
    program = _unet("gated_unet_unrewritten")
    with pytest.raises(UserError) as caught:
        tpuedge.build(program, "android", tmp_path / "android", quantize="none")
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message
    assert "failed to convert gated_unet_unrewritten for android at IR node add" in message
    assert (
        "(aten.add.Tensor) from" in message and "test_passes_repeat_expand.py" in message and "(x = x + x3)" in message
    )
    assert "Attempting to broadcast" in message and "internal error" not in message
    assert not (tmp_path / "android").exists()
