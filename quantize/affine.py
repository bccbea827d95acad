"""The one affine quantize / dequantize pair, computed exactly as TFLite's kernels do.

    q = clamp(round(x / scale) + zero_point, dtype min, dtype max)     (TFLite QUANTIZE)
    x = (q - zero_point) * scale                                        (TFLite DEQUANTIZE)

The details match the kernels, so an int8-I/O model fed through `quantize` sees the same
integers as a float-I/O model whose first op is QUANTIZE, in the same runtime:
  - `x / scale` is a float32 division (the kernels cast the scale to float; a float64 division
    turns 0.35 / 0.1 into 3.4999... instead of 3.5);
  - ties: TFLite's reference kernels and TFLite-Micro round half AWAY from zero (`std::round`),
    LiteRT's optimized and XNNPACK kernels (its default) round half to EVEN; measured on a
    one-op QUANTIZE model: 0.5 -> 1 in TFLite-Micro, 0 in LiteRT. `ties` picks one;
  - saturation at the integer dtype's bounds;
  - dequantize multiplies in double and casts to float32.
`scale` and `zero_point` are one value each (per-tensor) or one per slice along `axis`
(per-channel, as TFLite's `quantized_dimension`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["quantize", "dequantize", "round_half_away_from_zero", "TIES"]


def round_half_away_from_zero(v: Any, xp: Any = np) -> Any:
    """std::round, exactly (floor(|v| + 0.5) misrounds 0.49999997 in float32). xp: the array
    module of `v` (numpy, or jax.numpy for the cloud backend's traced integer arithmetic)."""
    whole = xp.trunc(v)
    return whole + xp.where(xp.abs(v - whole) >= 0.5, xp.sign(v), 0)


def _per_axis(values: Any, ndim: int, axis: int | None, dtype) -> np.ndarray:
    values = np.asarray(values, dtype).reshape(-1)
    if values.size == 1:
        return values.reshape(())
    if axis is None:
        raise ValueError(f"{values.size} per-channel quantization values need the axis they run along")
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


TIES = ("away", "even")


def quantize(
    x: Any, scale: Any, zero_point: Any, dtype: Any, axis: int | None = None, ties: str = "away"
) -> np.ndarray:
    """Real values -> integers of `dtype` (int8, int16, uint8, ...), saturating.

    ties: "away" as TFLite-Micro and TFLite's reference kernels, "even" as LiteRT's default kernels.
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, not {ties!r}")
    x = np.asarray(x, np.float32)
    dtype = np.dtype(dtype)
    scale = _per_axis(scale, x.ndim, axis, np.float32)
    zero = _per_axis(zero_point, x.ndim, axis, np.int64)
    bounds = np.iinfo(dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # inf / NaN saturate below, like the kernel's clamp
        ratio = x / scale
        q = (round_half_away_from_zero(ratio) if ties == "away" else np.rint(ratio)).astype(np.float64) + zero
    return np.clip(np.nan_to_num(q, nan=0.0), bounds.min, bounds.max).astype(dtype)


def dequantize(q: Any, scale: Any, zero_point: Any, axis: int | None = None) -> np.ndarray:
    """Integers -> real values as float32."""
    q = np.asarray(q)
    scale = _per_axis(scale, q.ndim, axis, np.float64)
    zero = _per_axis(zero_point, q.ndim, axis, np.int64)
    return ((q.astype(np.int64) - zero) * scale).astype(np.float32)
