"""The float lowering runs litert-torch's FX passes without its CanonicalizePass, a re-trace the
MLIR lowering repeats at once (edge/litert_lowering.py `convert_pass_list`): the list is
litert-torch's own less that pass, and the flatbuffer is the same byte for byte."""

from __future__ import annotations

import pytest
import torch

import tpuedge
from tpuedge.edge import litert_lowering
from tpuedge.edge.litert_session import litert_session


class _ConvNet(torch.nn.Module):
    """Layout work for the transposes pass: conv, BatchNorm, pooling, a flatten into a Linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.nn.functional.avg_pool2d(torch.relu(self.bn(self.conv(x))), 2).flatten(1))


class _Attention(torch.nn.Module):
    """Composites for BuildAtenCompositePass: LayerNorm, GELU, SDPA with a padding mask."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.mlp = torch.nn.Linear(16, 16)

    def forward(self, x, mask):
        q, k, v = (t.view(1, 6, 2, 8).transpose(1, 2) for t in self.qkv(self.norm(x)).chunk(3, -1))
        bias = (1.0 - mask[:, None, None, :].float()) * -1e4
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(1, 6, 16)
        return x + torch.nn.functional.gelu(self.mlp(y))


def _pass_types(run_passes) -> list[type]:
    """The passes `run_passes(ep)` runs (litert-torch's generative passes, then its FX passes),
    in order, recorded as they run."""
    with litert_session():
        from litert_torch import fx_infra

    recorded: list = []
    real = fx_infra.run_passes

    def record(exported_program, passes):
        recorded.extend(passes)
        return real(exported_program, passes)

    program = tpuedge.export(_ConvNet().eval(), (torch.zeros(1, 3, 8, 8),), name="convnet")
    ep = litert_lowering.decompose_for_litert(program.exported_program)
    fx_infra.run_passes = record
    try:
        with litert_session():
            run_passes(ep)
    finally:
        fx_infra.run_passes = real
    return [type(p) for p in recorded]


def test_the_pass_list_is_litert_torchs_less_its_canonicalize_pass():
    """Fails when an upgrade of litert-torch changes its list: review `convert_pass_list` then."""
    with litert_session():
        from litert_torch._convert import core
        from litert_torch.fx_infra import CanonicalizePass

    theirs = _pass_types(core._run_convert_passes)
    assert CanonicalizePass in theirs
    assert _pass_types(litert_lowering._convert_passes) == [t for t in theirs if t is not CanonicalizePass]


@pytest.mark.parametrize("make,example", [
    (_ConvNet, lambda: (torch.randn(1, 3, 8, 8),)),
    (_Attention, lambda: (torch.randn(1, 6, 16), torch.tensor([[1, 1, 1, 1, 0, 0]]))),
], ids=["convnet", "attention"])
def test_the_float_model_is_the_same_without_the_canonicalize_retrace(monkeypatch, make, example):
    torch.manual_seed(0)
    module = make().eval()
    ours = litert_lowering.lower_to_float_flatbuffer(tpuedge.export(module, example(), name="m"))
    with litert_session():
        from litert_torch._convert import core
    monkeypatch.setattr(litert_lowering, "_convert_passes", core._run_convert_passes)  # litert-torch's full list
    theirs = litert_lowering.lower_to_float_flatbuffer(tpuedge.export(module, example(), name="m"))
    assert ours == theirs
