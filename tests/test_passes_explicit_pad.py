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
