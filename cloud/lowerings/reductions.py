"""Reductions and scans: sum/mean/amax/var/any, max/min with indices, argmax, cumsum, sort, topk."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from tpuedge.cloud.lowerings.registry import jax_dtype, lowering, normalize_dim

__all__: list[str] = []


def _axes(x, dim):
    """torch: dim None or [] reduces every dim."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    if isinstance(dim, int):
        dim = [dim]
    return tuple(normalize_dim(d, x.ndim) for d in dim)


def _sum_dtype(x, dtype):
    if dtype is not None:
        return jax_dtype(dtype)
    # torch sums bool/int tensors in int64
    return jax_dtype("torch.int64") if not jnp.issubdtype(x.dtype, jnp.inexact) else None


@lowering("aten.sum.dim_IntList")
def sum_dim(x, dim, keepdim=False, dtype=None):
    return jnp.sum(x, axis=_axes(x, dim), keepdims=keepdim, dtype=_sum_dtype(x, dtype))


@lowering("aten.sum.default")
def sum_all(x, dtype=None):
    return jnp.sum(x, dtype=_sum_dtype(x, dtype))


@lowering("aten.mean.dim")
def mean_dim(x, dim, keepdim=False, dtype=None):
    return jnp.mean(x, axis=_axes(x, dim), keepdims=keepdim, dtype=jax_dtype(dtype))


@lowering("aten.mean.default")
def mean_all(x, dtype=None):
    return jnp.mean(x, dtype=jax_dtype(dtype))


@lowering("aten.prod.default")
def prod_all(x, dtype=None):
    return jnp.prod(x, dtype=_sum_dtype(x, dtype))


@lowering("aten.prod.dim_int")
def prod_dim(x, dim, keepdim=False, dtype=None):
    return jnp.prod(x, axis=_axes(x, dim), keepdims=keepdim, dtype=_sum_dtype(x, dtype))


@lowering("aten.amax.default")
def amax(x, dim=(), keepdim=False):
    return jnp.max(x, axis=_axes(x, dim), keepdims=keepdim)


@lowering("aten.amin.default")
def amin(x, dim=(), keepdim=False):
    return jnp.min(x, axis=_axes(x, dim), keepdims=keepdim)


@lowering("aten.max.default")
def max_all(x):
    return jnp.max(x)


@lowering("aten.min.default")
def min_all(x):
    return jnp.min(x)


def _index_dtype():
    return jax_dtype("torch.int64")


@lowering("aten.max.dim")
def max_dim(x, dim, keepdim=False):
    dim = normalize_dim(dim, x.ndim)
    if x.ndim == 0:
        return x, jnp.zeros((), _index_dtype())
    return jnp.max(x, axis=dim, keepdims=keepdim), jnp.argmax(x, axis=dim, keepdims=keepdim).astype(_index_dtype())


@lowering("aten.min.dim")
def min_dim(x, dim, keepdim=False):
    dim = normalize_dim(dim, x.ndim)
    if x.ndim == 0:
        return x, jnp.zeros((), _index_dtype())
    return jnp.min(x, axis=dim, keepdims=keepdim), jnp.argmin(x, axis=dim, keepdims=keepdim).astype(_index_dtype())


@lowering("aten.argmax.default")
def argmax(x, dim=None, keepdim=False):
    if dim is None:
        out = jnp.argmax(x.reshape(-1))
        return (out.reshape((1,) * x.ndim) if keepdim else out).astype(_index_dtype())
    return jnp.argmax(x, axis=normalize_dim(dim, x.ndim), keepdims=keepdim).astype(_index_dtype())


@lowering("aten.argmin.default")
def argmin(x, dim=None, keepdim=False):
    if dim is None:
        out = jnp.argmin(x.reshape(-1))
        return (out.reshape((1,) * x.ndim) if keepdim else out).astype(_index_dtype())
    return jnp.argmin(x, axis=normalize_dim(dim, x.ndim), keepdims=keepdim).astype(_index_dtype())


@lowering("aten.var.correction")
def var_correction(x, dim=None, correction=None, keepdim=False):
    ddof = 1 if correction is None else correction
    return jnp.var(x, axis=_axes(x, dim), ddof=ddof, keepdims=keepdim)


@lowering("aten.var.dim")
def var_dim(x, dim=None, unbiased=True, keepdim=False):
    return jnp.var(x, axis=_axes(x, dim), ddof=1 if unbiased else 0, keepdims=keepdim)


@lowering("aten.any.default")
def any_all(x):
    return jnp.any(x)


@lowering("aten.any.dim", "aten.any.dims")
def any_dim(x, dim=None, keepdim=False):
    return jnp.any(x, axis=_axes(x, dim), keepdims=keepdim)


@lowering("aten.all.default")
def all_all(x):
    return jnp.all(x)


@lowering("aten.all.dim", "aten.all.dims")
def all_dim(x, dim=None, keepdim=False):
    return jnp.all(x, axis=_axes(x, dim), keepdims=keepdim)


@lowering("aten.cumsum.default")
def cumsum(x, dim, dtype=None):
    return jnp.cumsum(x, axis=normalize_dim(dim, x.ndim), dtype=_sum_dtype(x, dtype))


@lowering("aten.cumprod.default")
def cumprod(x, dim, dtype=None):
    return jnp.cumprod(x, axis=normalize_dim(dim, x.ndim), dtype=_sum_dtype(x, dtype))


@lowering("aten.linalg_vector_norm.default")
def vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = x.astype(jax_dtype(dtype))
    axes = _axes(x, dim)
    a = jnp.abs(x)
    if ord == float("inf"):
        return jnp.max(a, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, axis=axes, keepdims=keepdim).astype(x.dtype)
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=keepdim))
    return jnp.sum(a**ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)


@lowering("aten.sort.default", "aten.sort.stable")
def sort(x, dim=-1, descending=False, stable=None):
    if isinstance(dim, bool):  # sort.stable(self, *, stable, dim, descending) positional quirk; always stable below
        dim = -1
    dim = normalize_dim(dim, x.ndim)
    if x.ndim == 0:
        return x, jnp.zeros((), _index_dtype())
    order = jnp.argsort(x, axis=dim, stable=True, descending=descending)
    return jnp.take_along_axis(x, order, axis=dim), order.astype(_index_dtype())


@lowering("aten.topk.default")
def topk(x, k, dim=-1, largest=True, sorted=True):
    dim = normalize_dim(dim, x.ndim)
    moved = jnp.moveaxis(x, dim, -1)
    if largest:
        values, indices = lax.top_k(moved, k)
    else:
        order = jnp.argsort(moved, axis=-1, stable=True)[..., :k]
        values, indices = jnp.take_along_axis(moved, order, axis=-1), order
    return jnp.moveaxis(values, -1, dim), jnp.moveaxis(indices, -1, dim).astype(_index_dtype())
