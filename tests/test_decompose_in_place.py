"""litert-torch's decompositions applied in place (edge/litert/decompose_in_place.py) against its whole
re-trace: the same operators, wired the same, giving the same numbers in LiteRT; and what it
cannot take still goes to the re-trace."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from models import TransformerBlock  # examples/models.py
from tpuedge.edge.litert import decompose_in_place, litert_lowering
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.litert.litert_runtime import LiteRTRunner


class _ResidualBlock(torch.nn.Module):
    """In-place ReLUs (torchvision's), a residual add, a pool and a Linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.relu = torch.nn.ReLU(inplace=True)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.relu(self.bn(self.conv1(x)))
        y = self.relu(self.conv2(y) + y)
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class _Recurrent(torch.nn.Module):
    """An LSTM (its decomposition writes in place inside) and an upsample."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 8, batch_first=True)
        self.conv = torch.nn.Conv1d(8, 2, 3, padding=1)

    def forward(self, x):
        y, _ = self.lstm(x)
        return F.interpolate(self.conv(y.transpose(1, 2)), scale_factor=2.0, mode="nearest")


CASES = {
    "residual": (_ResidualBlock, lambda: (torch.randn(1, 3, 8, 8),)),
    "encoder": (TransformerBlock, lambda: (torch.randn(1, 16, 64),)),  # LayerNorm, SDPA, GELU, views
    "recurrent": (_Recurrent, lambda: (torch.randn(1, 5, 4),)),
}


def _program(name):
    make, example = CASES[name]
    torch.manual_seed(0)
    module = make().eval()
    torch.manual_seed(1)
    return tpuedge.export(module, example(), name=name), example()


def _whole_retraces(monkeypatch) -> list:
    retraces: list = []
    real = torch.export.ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        retraces.append(len(self.graph.nodes))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    return retraces


@pytest.mark.parametrize("name,channels_last", [(name, False) for name in CASES] + [("residual", True)])
def test_in_place_gives_the_whole_re_trace_s_operators_and_numbers(name, channels_last, monkeypatch):
    """channels_last: mcu's NHWC inputs, whose pass left the inputs' tensor_meta NCHW; the
    re-trace wrote it anew, the first in-place version did not (the lowered function then took
    NCHW inputs: an MLIR verification error)."""
    retraces = _whole_retraces(monkeypatch)
    program, example = _program(name)
    ours = litert_lowering.lower_to_float_flatbuffer(program, channels_last=channels_last)
    assert retraces == []  # old code: 2 (the pre-convert table's and the pre-lower one's)

    monkeypatch.setattr(litert_lowering, "decompositions_in_place", contextlib.nullcontext)
    program, _ = _program(name)
    theirs = litert_lowering.lower_to_float_flatbuffer(program, channels_last=channels_last)
    assert len(retraces) == 2

    wiring = [tflite_file.operator_wiring(tflite_file.read_model(f)) for f in (ours, theirs)]
    assert wiring[0] == wiring[1]
    if channels_last:
        example = tuple(t.permute(0, 2, 3, 1).contiguous() for t in example)
    inputs = [t.numpy() for t in example]
    got = LiteRTRunner(ours).run(inputs)
    want = LiteRTRunner(theirs).run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


class _WriteThroughAView(torch.nn.Module):
    """An in-place ReLU on a tensor a slice still reads: only functionalization of the whole
    program gets that right."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        head = y[:, :2]
        y.relu_()
        return head * 2.0 + y[:, 2:]


def test_what_it_cannot_take_goes_to_the_whole_re_trace(monkeypatch):
    torch.manual_seed(0)
    module = _WriteThroughAView().eval()
    x = torch.randn(1, 3, 4, 4)
    program = tpuedge.export(module, (x,), name="write_through_a_view")
    declined = []
    real = decompose_in_place.decompose_in_place

    def spy(exported_program, table):
        done = real(exported_program, table)
        declined.append(done is None)
        return done

    monkeypatch.setattr(decompose_in_place, "decompose_in_place", spy)
    retraces = _whole_retraces(monkeypatch)
    flatbuffer = litert_lowering.lower_to_float_flatbuffer(program)
    assert declined[0] and len(retraces) >= 1
    with torch.no_grad():
        want = module(x).numpy()
    got = LiteRTRunner(flatbuffer).run([x.numpy()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["residual", "encoder"])
def test_every_node_keeps_what_litert_torch_names_its_source_line_from(name):
    """litert-torch writes a node's file and line into its MLIR location only where the node
    records where it came from (`from_node`), as a re-trace records for every node it copies. A
    converter refusal names the model's line from that location. Old code: the nodes kept as they
    were had none, and a refused op among them (a 6-D `constant_pad_nd`) was reported with no line."""
    from litert_torch.backend import debuginfo

    program, _ = _program(name)
    decomposed = litert_lowering.decompose_for_litert(program.exported_program)
    nodes = [n for n in decomposed.graph.nodes if n.op == "call_function" and n.meta.get("stack_trace")]
    assert nodes
    unnamed = [n.name for n in nodes if debuginfo.build_nodename_debuginfo(n) is None]
    assert unnamed == []
    assert all(debuginfo.build_mlir_file_debuginfo(n)[0] for n in nodes)
