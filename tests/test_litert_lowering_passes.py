"""The float lowering runs litert-torch's FX passes in its order, its CanonicalizePass (a full torch
re-trace) only where the graph needs it (edge/litert/litert_lowering.py `convert_passes`): the same
flatbuffer byte for byte as litert-torch's own list, one re-trace fewer on the graphs it skips."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.edge.litert import decompose_in_place, litert_lowering
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.litert.litert_session import litert_session


class _ConvNet(torch.nn.Module):
    """Convolutions, BatchNorm, a max pool, a global mean and a Linear: the layout pass leaves only
    its transposes, NHWC convolutions and NHWC max pool, so the re-trace is skipped."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = self.dw(F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2))
        return self.fc(y.mean((2, 3)))


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
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(1, 6, 16)
        return x + F.gelu(self.mlp(y))


class _PoolUpsample(torch.nn.Module):
    """The layout pass wraps the average pool and the resize in NHWC functions; only the
    re-trace gives them back to the composite pass (without it: a REDUCE_WINDOW and a gather)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = F.avg_pool2d(self.conv(x), 2)
        return F.interpolate(y, scale_factor=2.0, mode="nearest")


CASES = {
    "convnet": (_ConvNet, lambda: (torch.randn(1, 3, 8, 8),), False),
    "attention": (_Attention, lambda: (torch.randn(1, 6, 16), torch.tensor([[1, 1, 1, 1, 0, 0]])), False),
    "pool_upsample": (_PoolUpsample, lambda: (torch.randn(1, 3, 8, 8),), True),
}


def _program(name):
    make, example, _ = CASES[name]
    torch.manual_seed(0)
    module = make().eval()
    torch.manual_seed(1)
    return tpuedge.export(module, example(), name=name)


def _recorded_passes(run_passes, program) -> list[type]:
    """The pass types `run_passes(ep)` runs, in order, recorded as they run."""
    with litert_session():
        from litert_torch import fx_infra

    recorded: list = []
    real = fx_infra.run_passes

    def record(exported_program, passes):
        recorded.extend(passes)
        return real(exported_program, passes)

    ep = litert_lowering.decompose_for_litert(program.exported_program)
    fx_infra.run_passes = record
    try:
        with litert_session():
            run_passes(litert_lowering._private_copy(ep))
    finally:
        fx_infra.run_passes = real
    return [type(p) for p in recorded]


@pytest.mark.parametrize("name", list(CASES))
def test_the_pass_list_is_litert_torchs_with_the_retrace_where_needed(name):
    """Fails when an upgrade of litert-torch changes its list: review `convert_passes` then."""
    with litert_session():
        from litert_torch._convert import core
        from litert_torch.fx_infra import CanonicalizePass

    program = _program(name)
    theirs = _recorded_passes(core._run_convert_passes, program)
    ours = _recorded_passes(litert_lowering.convert_passes, program)
    assert CanonicalizePass in theirs
    needed = CASES[name][2]
    assert ours == (theirs if needed else [t for t in theirs if t is not CanonicalizePass])


@pytest.mark.parametrize("name", list(CASES))
def test_the_float_model_is_litert_torchs_byte_for_byte(monkeypatch, name):
    ours = litert_lowering.lower_to_float_flatbuffer(_program(name))
    with litert_session():
        from litert_torch._convert import core
    monkeypatch.setattr(litert_lowering, "convert_passes", core._run_convert_passes)  # litert-torch's own list
    theirs = litert_lowering.lower_to_float_flatbuffer(_program(name))
    assert ours == theirs
    if name == "pool_upsample":  # the composites survived (what skipping the re-trace here lost)
        model = tflite_file.read_model(ours)
        codes = tflite_file.operator_names(model)
        ops = {codes[op.opcodeIndex] for op in model.subgraphs[0].operators}
        assert {"AVERAGE_POOL_2D", "RESIZE_NEAREST_NEIGHBOR"} <= ops, ops


class _ReflectPad(torch.nn.Module):
    """A reflection-padded convolution, as Silero VAD's STFT front end pads its audio: litert-torch's
    pre-convert table writes the padding as a gather whose indices are an int64 arange, abs and sub."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 9)

    def forward(self, x):
        return self.conv(F.pad(x, (4, 4), mode="reflect"))


def test_constant_index_arithmetic_is_folded_before_the_lowering_retraces(monkeypatch):
    """Old code: three re-traces (the lowering's int64 -> int32 rewrite of the arange is a Python
    function its second pre-lower decomposition traces again) and the indices computed on device
    (ABS, SUB, LESS, ADD, SELECT before the GATHER_ND)."""
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    torch.manual_seed(0)
    module = _ReflectPad().eval()
    program = tpuedge.export(module, (torch.randn(1, 1, 64),), name="reflect_pad")
    retraces = []
    real = torch.export.ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        retraces.append(len(self.graph.nodes))
        return real(self, *args, **kwargs)

    in_place = decompose_in_place.decompose_in_place

    def counted_in_place(exported_program, table):
        done = in_place(exported_program, table)
        if done is not None:  # else it goes on to a whole re-trace, counted there
            retraces.append(len(exported_program.graph.nodes))
        return done

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    monkeypatch.setattr(decompose_in_place, "decompose_in_place", counted_in_place)
    flatbuffer = litert_lowering.lower_to_float_flatbuffer(program)
    # litert-torch's pre-convert table, and its pre-lower one (whole or in place)
    assert len(retraces) == 2, retraces
    model = tflite_file.read_model(flatbuffer)
    codes = tflite_file.operator_names(model)
    ops = [codes[op.opcodeIndex] for op in model.subgraphs[0].operators]
    assert "GATHER_ND" in ops and not {"ABS", "SUB", "LESS", "SELECT"} & set(ops), ops
    x = torch.randn(1, 1, 64)
    (got,) = LiteRTRunner(flatbuffer).run([x.numpy()])
    torch.testing.assert_close(torch.from_numpy(got), module(x), rtol=1e-5, atol=1e-5)
