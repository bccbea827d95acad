"""Ranges of ops that blow up near one input value: capped at what a quantized input can give.

RSQRT is unbounded near 0. The mcu build writes sqrt(x) as x * rsqrt(max(x, 1e-30))
(shared_ir/passes/powers.py), and a magnitude or energy that is ever near zero (silence in an
audio frame) sends one calibration value of RSQRT's output to ~1e7: min/max calibration then
gives the op a step (2,572 at int16 on silero-vad's mcu graph) larger than every value it
meets. Quantized, the op never sees those inputs: its input is on a grid whose smallest
positive value is the input's step, so no output exceeds 1/sqrt(step). The cap uses the 16-bit
step (the finer of the two an input can have), so it clips nothing either quantized input can
produce, and leaves alone every range whose observed inputs stay above that step (a LayerNorm's
variance plus eps, as a rule). One rule, read by the edge calibration
(edge/litert/singular_ranges.py) and by the IR sensitivity ranking (quantize/sensitivity.py).
"""

from __future__ import annotations

import math

__all__ = ["rsqrt_output_max", "RSQRT_OPS"]

_INT16_MAX = 32767  # symmetric int16 activations (ai-edge-quantizer's 16x8)
RSQRT_OPS = frozenset({"aten.rsqrt.default"})  # IR op keys the rule applies to


def rsqrt_output_max(input_min: float, input_max: float) -> float:
    """The largest RSQRT output a 16-bit quantized input in [input_min, input_max] can give
    (infinity where the range is empty)."""
    step = max(abs(float(input_min)), abs(float(input_max))) / _INT16_MAX
    return math.inf if step <= 0 else 1.0 / math.sqrt(step)
