"""TFLite's int8 kernel arithmetic in JAX: the QAT model's eval computes each point the way the
int8 kernel will (quantize/integer_kernels.py says which kernel that is), not by rounding a
float result, so TFLite-Micro's outputs can be predicted to the int8 step.

`requantize` is TFLite's MultiplyByQuantizedMultiplier, the rescale every int8 kernel ends
with. The real multiplier m = f * 2^e (f in [0.5, 1)): the int32 sum is shifted left by
max(e, 0), multiplied by f with rounding half up (SaturatingRoundingDoublingHighMul), then
shifted right by max(-e, 0) with rounding half away from zero (RoundingDivideByPOT). The two
roundings are why rounding the float result once differs near ties.

Values are float32 arrays holding integers (JAX runs without 64-bit types here). Sums of int8
products are exact in float32 below 2^24, but the multiplier keeps 24 bits where TFLite keeps
31 and the product is rounded to 24 bits, so a sum whose scaled value sits that close to the
first rounding's tie can land one step off: 0.03% of random sums
(tests/test_int8_arithmetic.py), against 2.7% for rounding the float product once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp

from tpuedge.quantize.activation_ranges import INT8_MAX, INT8_MIN, WEIGHT_MAX
from tpuedge.quantize.affine import round_half_away_from_zero
from tpuedge.quantize.integer_kernels import IntegerKernel

__all__ = ["requantize", "kernel_output"]

_ADD_LEFT_SHIFT = 20  # TFLite's int8 ADD: inputs go 20 bits up before rescaling to a common scale


def requantize(total, multiplier):
    """round(total * multiplier) the way TFLite's kernels compute it (module docstring)."""
    fraction, exponent = jnp.frexp(jnp.asarray(multiplier, jnp.float32))
    exponent = exponent.astype(jnp.float32)
    shifted = total * jnp.exp2(jnp.maximum(exponent, 0.0))
    high = jnp.floor(shifted * fraction + 0.5)
    return round_half_away_from_zero(high * jnp.exp2(-jnp.maximum(-exponent, 0.0)), xp=jnp)


def _levels(value, scale):
    """An int8 tensor's integer offset from its zero point, from its dequantized value."""
    return jnp.round(value / scale)


def _operands(kernel: IntegerKernel, values, grid) -> list[tuple[Any, Any]]:
    """(integer levels, scale) of each input of the kernel."""
    operands = []
    for name, source_grid in zip(kernel.inputs, kernel.grids):
        input_scale, _ = grid(source_grid)
        operands.append((_levels(values[name], input_scale), input_scale))
    return operands


def kernel_output(
    kernel: IntegerKernel,
    values: Mapping[str, Any],
    params: Mapping[str, Any],
    grid: Callable[[str], tuple[Any, Any]],
    point: str,
):
    """The dequantized int8 output of `point` as its TFLite kernel computes it.

    values: node or parameter name -> value as the hook passed it on (inputs on their int8 grids,
    the producer's float sum, a bias as is); params: state name -> the float parameter (the
    weight before its fake int8); grid(point) -> (scale, zero point).
    """
    scale, zero = grid(point)
    if kernel.kind == "weighted":
        input_scale, _ = grid(kernel.grids[0])
        weight = params[kernel.weight]
        weight_scale = jnp.maximum(jnp.max(jnp.abs(weight.reshape(weight.shape[0], -1)), axis=1), 1e-9) / WEIGHT_MAX
        produced = values[kernel.producer]
        shape = [1] * produced.ndim
        shape[kernel.channel_axis] = -1
        sum_scale = (input_scale * weight_scale).reshape(shape)
        bias = values[kernel.bias].reshape(shape) if kernel.bias else 0.0
        # the float sum holds bias + an integer sum of products; the int8 kernel adds the bias as int32
        total = jnp.round((produced - bias) / sum_scale) + jnp.round(bias / sum_scale)
        levels = requantize(total, sum_scale / scale)
    elif kernel.kind == "mul":
        (levels_a, scale_a), (levels_b, scale_b) = _operands(kernel, values, grid)
        levels = requantize(levels_a * levels_b, scale_a * scale_b / scale)
    elif kernel.kind == "add":
        (levels_a, scale_a), (levels_b, scale_b) = _operands(kernel, values, grid)
        common = 2.0 * jnp.maximum(scale_a, scale_b)
        up = 2.0**_ADD_LEFT_SHIFT
        total = requantize(levels_a * up, scale_a / common) + requantize(levels_b * up, scale_b / common)
        levels = requantize(total, common / (up * scale))
    elif kernel.kind == "mean":
        input_scale, _ = grid(kernel.grids[0])
        source = values[kernel.inputs[0]]
        count = 1
        for d in kernel.dims:
            count *= source.shape[d]
        total = jnp.sum(
            _levels(source, input_scale), axis=kernel.dims, keepdims=values[kernel.producer].ndim == source.ndim
        )
        levels = requantize(total, input_scale / (scale * count))
    else:
        raise ValueError(f"no int8 arithmetic for kernel kind {kernel.kind!r}")
    low, high = float(INT8_MIN), float(INT8_MAX)
    q = levels + zero
    if kernel.clamp is not None:
        q = jnp.clip(
            q,
            jnp.maximum(low, zero + jnp.round(kernel.clamp[0] / scale)),
            high if kernel.clamp[1] is None else jnp.minimum(high, zero + jnp.round(kernel.clamp[1] / scale)),
        )
    return ((jnp.clip(q, low, high) - zero) * scale).astype(values[kernel.producer].dtype)
