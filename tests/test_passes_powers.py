"""The powers pass: x**2, x**3, x**0.5, x**-0.5, sqrt and the 2-norm (F.normalize) as MUL, SUM
and RSQRT, so spectrogram magnitudes and normalized embeddings build for mcu (silero-vad and
MiniLM were refused on aten.pow and aten.linalg_vector_norm); exact in float."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.powers import PowersAsProducts
from tpuedge.shared_ir.program import Program


class _Magnitude(torch.nn.Module):
    """A conv front end's magnitude, cubic and inverse-root features, and a normalized embedding."""

    def __init__(self):
        super().__init__()
        self.re, self.im = torch.nn.Conv1d(1, 8, 5, stride=2), torch.nn.Conv1d(1, 8, 5, stride=2)
        self.fc = torch.nn.Linear(8 * 14, 6)

    def forward(self, x):
        magnitude = torch.sqrt(self.re(x) ** 2 + self.im(x) ** 2)
        energy = (magnitude**0.5 + 0.1 * magnitude**3) * (magnitude + 1.0) ** -0.5
        return F.normalize(self.fc(energy.flatten(1)), dim=-1), torch.linalg.vector_norm(energy, 2, dim=(1, 2))


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_Magnitude().eval(), (torch.zeros(1, 1, 32),), name="magnitude")


def _samples(count=40, seed=0):
    return [[x] for x in np.random.default_rng(seed).standard_normal((count, 1, 1, 32)).astype(np.float32)]


def test_powers_roots_and_norms_become_products_with_the_same_numbers():
    program = _program()
    ep, result = PowersAsProducts()(program.exported_program)
    rewritten = Program(ep, name="magnitude")
    assert result.details["rewritten"] == {"2-norm": 2, "sqrt": 1, "x**-0.5": 1, "x**0.5": 1, "x**2": 2, "x**3": 1}
    left = {k for k in rewritten.op_histogram if k.startswith(("aten.pow", "aten.sqrt", "aten.linalg_vector_norm"))}
    assert left == set()
    for sample in _samples(4, seed=1):
        for want, got in zip(program.run(*sample), rewritten.run(*sample)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    zero = [np.zeros((1, 1, 32), np.float32)]  # sqrt(0) and the norm of 0 stay 0, not NaN
    assert all(np.isfinite(o).all() for o in rewritten.run(*zero))


def test_other_exponents_stay_for_the_check_to_report():
    class Cube(torch.nn.Module):
        def forward(self, x):
            return x**2.5

    program = tpuedge.export(Cube(), (torch.ones(1, 4),), name="odd_power")
    ep, result = PowersAsProducts()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program
    assert [p.subject for p in program.check("mcu")] == ["aten.pow.Tensor_Scalar"]


@pytest.mark.slow
def test_mcu_check_and_tflm_build_take_them(tmp_path):
    """Old code: aten.pow.Tensor_Scalar, aten.sqrt, aten.linalg_vector_norm, aten.clamp_min and
    aten.expand_as refused by the mcu check."""
    program = _program()
    assert program.check("mcu") == []
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(), min_cosine=0.95)
    budget = artifact.manifest["accuracy_budget"]
    assert budget["met"] and min(budget["measured"]["sample_cosine_per_output"]) >= 0.95
    rewrite = next(r for r in artifact.manifest["rewrites"] if r["pass"] == "powers-as-products")
    assert rewrite["accuracy_cost_vs_original_float"]["cosine"] > 0.99999
