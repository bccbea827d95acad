"""Pointwise core-ATen ops: arithmetic, comparisons, logic, math functions, activations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from tpuedge.cloud.lowerings.registry import LOWERINGS, lowering, normalize_dim

__all__: list[str] = []


# ---- one-to-one math (torch and jax.numpy agree on values, NaN and inf handling) -------------
_UNARY = {
    "aten.abs.default": jnp.abs,
    "aten.neg.default": jnp.negative,
    "aten.exp.default": jnp.exp,
    "aten.expm1.default": jnp.expm1,
    "aten.log.default": jnp.log,
    "aten.log1p.default": jnp.log1p,
    "aten.log2.default": jnp.log2,
    "aten.log10.default": jnp.log10,
    "aten.sqrt.default": jnp.sqrt,
    "aten.rsqrt.default": lax.rsqrt,
    "aten.reciprocal.default": jnp.reciprocal,
    "aten.sin.default": jnp.sin,
    "aten.cos.default": jnp.cos,
    "aten.tan.default": jnp.tan,
    "aten.asin.default": jnp.arcsin,
    "aten.acos.default": jnp.arccos,
    "aten.atan.default": jnp.arctan,
    "aten.sinh.default": jnp.sinh,
    "aten.cosh.default": jnp.cosh,
    "aten.tanh.default": jnp.tanh,
    "aten.asinh.default": jnp.arcsinh,
    "aten.acosh.default": jnp.arccosh,
    "aten.atanh.default": jnp.arctanh,
    "aten.erf.default": jax.scipy.special.erf,
    "aten.floor.default": jnp.floor,
    "aten.ceil.default": jnp.ceil,
    "aten.round.default": jnp.round,  # half to even, as torch
    "aten.trunc.default": jnp.trunc,
    "aten.sign.default": jnp.sign,
    "aten.sigmoid.default": jax.nn.sigmoid,
    "aten.relu.default": jax.nn.relu,  # gradient 0 at 0, as torch
    "aten.logical_not.default": jnp.logical_not,
    "aten.bitwise_not.default": jnp.invert,  # logical not on bool, as torch
    "aten.isnan.default": jnp.isnan,
    "aten.isinf.default": jnp.isinf,
}
for _key, _fn in _UNARY.items():
    LOWERINGS.add(_key, lambda x, _fn=_fn: _fn(x))

_BINARY = {
    "aten.mul.Tensor": jnp.multiply,
    "aten.mul.Scalar": jnp.multiply,
    "aten.div.Tensor": jnp.true_divide,
    "aten.div.Scalar": jnp.true_divide,
    "aten.pow.Tensor_Tensor": jnp.power,
    "aten.pow.Scalar": jnp.power,
    "aten.remainder.Tensor": jnp.remainder,  # sign of the divisor, as torch
    "aten.remainder.Scalar": jnp.remainder,
    "aten.fmod.Tensor": jnp.fmod,
    "aten.fmod.Scalar": jnp.fmod,
    "aten.atan2.default": jnp.arctan2,
    "aten.maximum.default": jnp.maximum,
    "aten.minimum.default": jnp.minimum,
    "aten.eq.Tensor": jnp.equal,
    "aten.eq.Scalar": jnp.equal,
    "aten.ne.Tensor": jnp.not_equal,
    "aten.ne.Scalar": jnp.not_equal,
    "aten.lt.Tensor": jnp.less,
    "aten.lt.Scalar": jnp.less,
    "aten.le.Tensor": jnp.less_equal,
    "aten.le.Scalar": jnp.less_equal,
    "aten.gt.Tensor": jnp.greater,
    "aten.gt.Scalar": jnp.greater,
    "aten.ge.Tensor": jnp.greater_equal,
    "aten.ge.Scalar": jnp.greater_equal,
    "aten.logical_and.default": jnp.logical_and,
    "aten.logical_or.default": jnp.logical_or,
    "aten.logical_xor.default": jnp.logical_xor,
    "aten.bitwise_and.Tensor": jnp.bitwise_and,
    "aten.bitwise_and.Scalar": jnp.bitwise_and,
    "aten.bitwise_or.Tensor": jnp.bitwise_or,
    "aten.bitwise_or.Scalar": jnp.bitwise_or,
    "aten.bitwise_xor.Tensor": jnp.bitwise_xor,
    "aten.bitwise_xor.Scalar": jnp.bitwise_xor,
}
for _key, _fn in _BINARY.items():
    LOWERINGS.add(_key, lambda a, b, _fn=_fn: _fn(a, b))


# ---- arithmetic with torch-specific arguments ------------------------------------------------
@lowering("aten.add.Tensor", "aten.add.Scalar")
def add(a, b, alpha=1):
    return a + (b if alpha == 1 else b * alpha)


@lowering("aten.sub.Tensor", "aten.sub.Scalar")
def sub(a, b, alpha=1):
    return a - (b if alpha == 1 else b * alpha)


@lowering("aten.pow.Tensor_Scalar")
def pow_tensor_scalar(x, exponent):
    # a Python int exponent becomes lax.integer_pow (exact x*x), as torch does for x**2
    if isinstance(exponent, float) and exponent.is_integer() and abs(exponent) <= 8:
        exponent = int(exponent)
    return jnp.power(x, exponent)


@lowering("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(a, b, rounding_mode=None):
    if rounding_mode is None:
        return jnp.true_divide(a, b)
    integer = all(jnp.issubdtype(jnp.result_type(v), jnp.integer) for v in (a, b))
    if rounding_mode == "trunc":
        if integer:  # lax.div rounds integers toward zero
            dtype = jnp.result_type(a, b)
            return lax.div(*jnp.broadcast_arrays(jnp.asarray(a, dtype), jnp.asarray(b, dtype)))
        return jnp.trunc(jnp.true_divide(a, b))
    return jnp.floor_divide(a, b)


@lowering("aten.clamp.default", "aten.clamp.Tensor")
def clamp(x, min=None, max=None):
    if min is not None:
        x = jnp.maximum(x, min)
    if max is not None:
        x = jnp.minimum(x, max)  # min > max gives max everywhere, as torch
    return x


@lowering("aten.where.self")
def where(condition, a, b):
    return jnp.where(condition, a, b)


@lowering("aten.fill.Scalar")
def fill(x, value):
    return jnp.full_like(x, value)


# ---- activations ---------------------------------------------------------------------------
@lowering("aten.gelu.default")
def gelu(x, approximate="none"):
    return jax.nn.gelu(x, approximate=approximate == "tanh")


@lowering("aten.hardtanh.default")
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return jnp.clip(x, min_val, max_val)


@lowering("aten.leaky_relu.default")
def leaky_relu(x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * negative_slope)


@lowering("aten.elu.default")
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0) * input_scale))


@lowering("aten._softmax.default")
def softmax(x, dim, half_to_float=False):
    return jax.nn.softmax(x, axis=dim)


@lowering("aten._log_softmax.default")
def log_softmax(x, dim, half_to_float=False):
    return jax.nn.log_softmax(x, axis=dim)


# torch's fft_norm_mode (0: none, 1: by 1/sqrt(n), 2: by 1/n) as numpy's / JAX's names
_FFT_NORM = {0: "backward", 1: "ortho", 2: "forward"}


@lowering("aten._fft_r2c.default")
def fft_r2c(x, dim, normalization, onesided):
    # torch.stft and torch.fft.rfft decompose to it (an audio model's spectrogram in forward)
    axes = [normalize_dim(d, x.ndim) for d in dim]
    if onesided:  # the last of `dim` keeps n // 2 + 1 bins, as rfftn's last axis does
        return jnp.fft.rfftn(x, axes=axes, norm=_FFT_NORM[normalization]).astype(jnp.complex64)
    return jnp.fft.fftn(x.astype(jnp.complex64), axes=axes, norm=_FFT_NORM[normalization])


# the inverse transforms scale by the same torch mode: 2 (by 1/n) is numpy's "backward" there
_IFFT_NORM = {0: "forward", 1: "ortho", 2: "backward"}


@lowering("aten._fft_c2c.default")
def fft_c2c(x, dim, normalization, forward):
    # torch.fft.fft / ifft / fft2 of complex values (FNet's token mixing, spectral layers)
    axes = [normalize_dim(d, x.ndim) for d in dim]
    if forward:
        return jnp.fft.fftn(x, axes=axes, norm=_FFT_NORM[normalization]).astype(jnp.complex64)
    return jnp.fft.ifftn(x, axes=axes, norm=_IFFT_NORM[normalization]).astype(jnp.complex64)


@lowering("aten._fft_c2r.default")
def fft_c2r(x, dim, normalization, last_dim_size):
    # torch.fft.irfft / irfftn: back to real values (a Fourier neural operator's spectral conv)
    axes = [normalize_dim(d, x.ndim) for d in dim]
    sizes = [x.shape[a] for a in axes[:-1]] + [int(last_dim_size)]
    return jnp.fft.irfftn(x, s=sizes, axes=axes, norm=_IFFT_NORM[normalization]).astype(jnp.float32)


@lowering("aten.view_as_complex.default")
def view_as_complex(x):
    # a complex weight kept as real pairs (..., 2), as Fourier layers store theirs
    return jax.lax.complex(x[..., 0], x[..., 1])


@lowering("aten.view_as_real.default")
def view_as_real(x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
