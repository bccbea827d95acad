"""Tensor factories: full, empty, arange, scalar_tensor (dtype inferred as torch does)."""

from __future__ import annotations

import jax.numpy as jnp

from tpuedge.cloud.lowerings.registry import default_float, jax_dtype, lowering

__all__ = ["infer_dtype"]


def infer_dtype(dtype, *values):
    """torch's rule for factories without dtype: bool -> bool, all ints -> int64, else float."""
    if dtype is not None:
        return jax_dtype(dtype)
    if values and all(isinstance(v, bool) for v in values):
        return jnp.bool_
    if values and all(isinstance(v, int) for v in values):
        return jax_dtype("torch.int64")
    return default_float()


@lowering("aten.full.default")
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.full(tuple(size), fill_value, infer_dtype(dtype, fill_value))


@lowering("aten.full_like.default")
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.full(x.shape, fill_value, x.dtype if dtype is None else jax_dtype(dtype))


@lowering("aten.empty.memory_format")
def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # uninitialised in torch; zeros here (any value is a valid "empty")
    return jnp.zeros(tuple(size), infer_dtype(dtype))


@lowering("aten.empty_strided.default")
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(tuple(size), infer_dtype(dtype))


@lowering("aten.arange.start_step")
def arange(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.arange(start, end, step, dtype=infer_dtype(dtype, start, end, step))


@lowering("aten.arange.default")
def arange_end(end, dtype=None, layout=None, device=None, pin_memory=None):
    return arange(0, end, 1, dtype)


@lowering("aten.arange.start")
def arange_start(start, end, dtype=None, layout=None, device=None, pin_memory=None):
    return arange(start, end, 1, dtype)


@lowering("aten.scalar_tensor.default")
def scalar_tensor(value, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.asarray(value, jax_dtype(dtype) if dtype is not None else default_float())
