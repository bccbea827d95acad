"""RSQRT's calibrated range capped at what a quantized input can give (quantize/singular_ranges.py).

The mcu build writes sqrt(x) as x * rsqrt(max(x, 1e-30)); a magnitude that is zero in one
calibration sample (a silent frame) gave RSQRT's output a float range up to 1e15, and every
quantized value of it rounded to 0 (silero-vad on mcu: cosine 0.37 with every activation int16)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize.singular_ranges import rsqrt_output_max


class _Magnitude(torch.nn.Module):
    """The 2-norm over a signal's channels, then a Linear over it (written as a sum of squares: two
    squares added are a complex magnitude, which mcu writes as projections with no RSQRT)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc(torch.sqrt((x**2).sum(dim=1)))


def _samples(count: int, rng) -> list:
    samples = [(rng.standard_normal((1, 2, 32)).astype(np.float32),) for _ in range(count)]
    samples[0] = (np.zeros((1, 2, 32), np.float32),)  # a silent frame
    return samples


def test_the_cap_is_the_output_of_the_smallest_positive_16_bit_input():
    assert rsqrt_output_max(0.0, 32767.0) == pytest.approx(1.0)
    assert rsqrt_output_max(-4.0, 2.0) == pytest.approx(1.0 / np.sqrt(4.0 / 32767))
    assert rsqrt_output_max(0.0, 0.0) == np.inf


def test_a_magnitude_that_is_zero_in_calibration_quantizes_on_mcu(tmp_path, monkeypatch):
    """Every activation at 16 bits on the model (no op group, no ranking: the rung alone): with the
    RSQRT range uncapped its int16 step was ~3e10 and the magnitude came out 0 everywhere."""
    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    torch.manual_seed(0)
    program = tpuedge.export(_Magnitude().eval(), (torch.zeros(1, 2, 32),), name="magnitude")
    rng = np.random.default_rng(0)
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(24, rng))
    recipe = art.manifest["quantization"]["recipe"]
    assert recipe["capped_ranges"], "the RSQRT output's range was not capped"
    ((before, after),) = recipe["capped_ranges"].values()
    assert before > 1e6 and after < 100
    cosine = art.manifest["verification"]["held_out"]["tflm_vs_float"]["sample_cosine"]
    assert cosine >= 0.99


def test_the_ir_ranking_caps_the_same_range():
    """The sensitivity ranking fakes int8 with the ranges the edge calibration uses: uncapped, it
    ranked the rsqrt first by far (silero-vad's mcu graph: loss 0.41, range up to 8.4e7)."""
    from tpuedge.edge.mcu.mcu_capability import mcu_passes
    from tpuedge.quantize.sensitivity import rank_quant_points
    from tpuedge.shared_ir.targets import ir_evaluator
    from tpuedge.shared_ir.program import Program

    torch.manual_seed(0)
    program = tpuedge.export(_Magnitude().eval(), (torch.zeros(1, 2, 32),), name="magnitude")
    program = Program(mcu_passes().run(program.exported_program)[0], name="magnitude")
    ranked = {
        p.op: p for p in rank_quant_points(program, _samples(8, np.random.default_rng(0)), evaluator=ir_evaluator())
    }
    rsqrt = ranked["aten.rsqrt.default"]
    assert rsqrt.high < 100
