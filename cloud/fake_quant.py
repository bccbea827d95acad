"""Fake int8 in the JAX lowering: the edge targets' int8 scheme, differentiable.

- weights: per-output-channel symmetric int8, scale = max|w| / 127, values rounded and clamped
  to [-127, 127];
- activations: asymmetric per-tensor int8 over a range (`quantize.activation_ranges.int8_affine`),
  rounded, clamped to [-128, 127], dequantized;
- gradients pass straight through (the rounding's gradient is taken as 1).

`FakeQuantHook` applies them at the `QuantPoints` of the program (a `JaxProgram.call_transformed`
transform) and records each point's batch [min, max] for the range statistics; with learned
ranges (`QatConfig(ranges="learned")`) the ranges are parameters and get gradients instead.
With `integer=True` (the eval) a point whose int8 kernel is known is computed with that
kernel's arithmetic (cloud/int8_arithmetic.py): int32 bias, fixed-point rescaling and its two
roundings, so the eval predicts TFLite's int8 outputs value for value, not only near them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from tpuedge.cloud.int8_arithmetic import kernel_output
from tpuedge.quantize.activation_ranges import INT8_MAX, INT8_MIN, WEIGHT_MAX, QuantPoints, int8_affine

__all__ = ["fake_quant_weight", "fake_quant_activation", "fake_quant_activation_learned", "FakeQuantHook"]


def _straight_through(x, quantized):
    return x + jax.lax.stop_gradient(quantized - x)


def fake_quant_weight(w, axis: int = 0):
    """Per-channel symmetric int8 along `axis`, straight-through."""
    reduce = tuple(d for d in range(w.ndim) if d != axis)
    bound = jnp.max(jnp.abs(w), axis=reduce, keepdims=True)
    scale = jnp.maximum(bound, 1e-9) / WEIGHT_MAX
    q = jnp.clip(jnp.round(w / scale), -WEIGHT_MAX, WEIGHT_MAX)
    return _straight_through(w, q * scale)


def fake_quant_activation(x, lo, hi):
    """Asymmetric per-tensor int8 over [lo, hi], straight-through (no gradient to the range)."""
    return _straight_through(x, jax.lax.stop_gradient(fake_quant_activation_learned(x, lo, hi)))


def fake_quant_activation_learned(x, lo, hi):
    """The same int8 values with a gradient for the range too (LSQ-style): the rounding is
    straight-through, the clamp is not, and the step size carries the range's gradient."""
    scale, zero = int8_affine(lo, hi, jnp)
    zero = jax.lax.stop_gradient(zero)
    scaled = x / scale
    q = jnp.clip(_straight_through(scaled, jnp.round(scaled)) + zero, INT8_MIN, INT8_MAX)
    return ((q - zero) * scale).astype(x.dtype)


class FakeQuantHook:
    """The transform for one call: fakes int8 at the points with `ranges`; records batch ranges.

    ranges: point -> [min, max] (jax arrays); `use_batch` (a traced bool) makes a point use its
    own batch range instead (the first training step, before any range is known).
    """

    def __init__(
        self,
        plan: QuantPoints,
        ranges: dict[str, Any],
        use_batch: Any = False,
        learned: bool = False,
        integer: bool = False,
    ):
        self._points = set(plan.points)
        self._kernels = plan.kernels if integer else {}
        self._params: dict[str, Any] = {}  # what the kernels read: the float parameters,
        self._values: dict[str, Any] = {}  # and each node's value as passed on (a kernel's producer: its float sum)
        self._weights = plan.weights
        self._fixed = plan.fixed
        self._ranges = ranges
        self._use_batch = use_batch
        self._activation = fake_quant_activation_learned if learned else fake_quant_activation
        self.observed: dict[str, Any] = {}
        self._used: dict[str, Any] = {}  # point -> the [min, max] its fake int8 used this call

    def __call__(self, kind: str, key: str, value):
        if not self._kernels:
            return self._fake(kind, key, value)
        if kind == "param":
            self._params[key] = value
        self._values[key] = value
        faked = self._fake(kind, key, value)
        if key in self._kernels:  # the kernel's values, with the fake int8's gradient (straight through)
            exact = kernel_output(self._kernels[key], self._values, self._params, self._grid, key)
            faked = faked + jax.lax.stop_gradient(exact - faked)
        self._values[key] = faked
        return faked

    def _grid(self, point: str):
        lo, hi = self._fixed.get(point) or self._used[point]
        return int8_affine(lo, hi, jnp)

    def _fake(self, kind: str, key: str, value):
        if kind == "param":
            return fake_quant_weight(value, self._weights[key]) if key in self._weights else value
        if key not in self._points or not hasattr(value, "dtype") or not jnp.issubdtype(value.dtype, jnp.floating):
            return value
        if key in self._fixed:  # the kernel's own output range, not a statistic
            return fake_quant_activation(value, *self._fixed[key])
        batch = jax.lax.stop_gradient(jnp.stack([jnp.min(value), jnp.max(value)]).astype(jnp.float32))
        self.observed[key] = batch
        lo_hi = self._used[key] = jnp.where(self._use_batch, batch, self._ranges.get(key, batch))
        return self._activation(value, lo_hi[0], lo_hi[1])
