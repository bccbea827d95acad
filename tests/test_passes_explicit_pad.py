"""The explicit-pad pass: aten.pad becomes the op for its mode, with identical numbers."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.explicit_pad import ExplicitPad
from tpuedge.shared_ir.program import Program


class _Pads(torch.nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 1, 1, 1), mode="reflect") + F.pad(x, (1, 1, 1, 1), value=0.5)


def test_pad_modes_become_explicit_ops_with_the_same_values():
    program = tpuedge.export(_Pads(), (torch.zeros(1, 2, 5, 5),), name="pads")
    ep, result = ExplicitPad()(program.exported_program)
    rewritten = Program(ep, name="pads")
    assert result.changed == 2
    hist = rewritten.op_histogram
    assert hist.get("aten.reflection_pad2d.default") == 1 and hist.get("aten.constant_pad_nd.default") == 1
    assert "aten.pad.default" not in hist and program.op_histogram.get("aten.pad.default") == 2
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(program.run(x)[0], rewritten.run(x)[0])
    assert program.check("mcu") == []  # the mcu passes go on to rewrite reflect padding as slices + concat


class _PadIsTheOutput(torch.nn.Module):
    def forward(self, x):
        return F.pad(x, (0, 1)), F.pad(x, (2, 2), mode="replicate")


def test_a_pad_the_program_returns_is_renamed_in_its_signature():
    """Old code rewired the graph's output but left the signature naming the erased `aten.pad`:
    torch's verifier then refused the program (the android lowering met it once android ran this
    pass: tests/test_direct_lowerings.py's slices-and-pads model)."""
    program = tpuedge.export(_PadIsTheOutput(), (torch.zeros(1, 2, 6),), name="pad_out")
    ep, result = ExplicitPad()(program.exported_program)
    assert result.changed == 2
    ep.validate()  # torch's verifier: outputs in the signature are the graph's
    rewritten = Program(ep, name="pad_out")
    x = np.random.default_rng(0).standard_normal((1, 2, 6)).astype(np.float32)
    for want, got in zip(program.run(x), rewritten.run(x)):
        np.testing.assert_array_equal(want, got)
