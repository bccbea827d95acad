"""`alpha` on add / sub / rsub moved onto its operand (shared_ir/passes/alpha_scale.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.alpha_scale import AlphaAsMul
from tpuedge.shared_ir.program import Program


class WithAlpha(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.linspace(-1, 1, 4))

    def forward(self, x):
        y = self.linear(x)
        return (
            torch.add(x, y, alpha=2),
            torch.sub(y, self.shift, alpha=0.5),
            torch.rsub(y, 1.0, alpha=3),
            torch.add(y, 2.0, alpha=0.25),
            torch.add(x, y),
        )


def test_alpha_is_moved_onto_its_operand_and_android_builds():
    """Old code: litert-torch's add/sub lowerings took no alpha: an internal error (TypeError)."""
    torch.manual_seed(0)
    program = tpuedge.export(WithAlpha().eval(), (torch.zeros(2, 4),), name="alpha")
    ep, result = AlphaAsMul()(program.exported_program)
    assert result.changed == 4  # the plain add is left alone
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    for ours, reference in zip(Program(ep, name="alpha").run(x), program.run(x)):
        np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-6)
    artifact = tpuedge.build(program, "android", None, quantize="none")
    for ours, reference in zip(artifact.run(x), program.run(x)):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_a_program_without_alpha_is_returned_as_it_is():
    program = tpuedge.export(torch.nn.Linear(4, 4).eval(), (torch.zeros(2, 4),), name="plain")
    ep, result = AlphaAsMul()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
