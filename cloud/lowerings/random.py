"""Ops that draw random numbers. Each gets its own key from the interpreter (`rng=`), which
folds the node's position into the step's key: the same key gives the same draws.

The draws follow torch's distributions, not torch's generator: dropout masks differ from
torch eager's for the same seed (compare statistics, not values)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tpuedge.cloud.lowerings.creation import infer_dtype
from tpuedge.cloud.lowerings.registry import lowering, random_op

__all__: list[str] = []


@lowering("aten.native_dropout.default")
@random_op
def native_dropout(x, p, train, *, rng):
    if train is False or p == 0:
        return x, jnp.ones(x.shape, bool)
    keep = jax.random.bernoulli(rng, 1.0 - p, x.shape)
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return jnp.where(keep, x * scale, jnp.zeros_like(x)), keep


@lowering("aten.bernoulli.p")
@random_op
def bernoulli_p(x, p=0.5, generator=None, *, rng):
    return jax.random.bernoulli(rng, p, x.shape).astype(x.dtype)


@lowering("aten.bernoulli.default")
@random_op
def bernoulli(x, generator=None, *, rng):
    return (jax.random.uniform(rng, x.shape) < x).astype(x.dtype)


@lowering("aten.rand.default")
@random_op
def rand(size, dtype=None, layout=None, device=None, pin_memory=None, *, rng):
    return jax.random.uniform(rng, tuple(size), infer_dtype(dtype))


@lowering("aten.randn.default")
@random_op
def randn(size, dtype=None, layout=None, device=None, pin_memory=None, *, rng):
    return jax.random.normal(rng, tuple(size), infer_dtype(dtype))


@lowering("aten.rand_like.default")
@random_op
def rand_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, *, rng):
    return jax.random.uniform(rng, x.shape, x.dtype if dtype is None else infer_dtype(dtype))


@lowering("aten.randn_like.default")
@random_op
def randn_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, *, rng):
    return jax.random.normal(rng, x.shape, x.dtype if dtype is None else infer_dtype(dtype))


@lowering("aten.randperm.default")
@random_op
def randperm(n, dtype=None, layout=None, device=None, pin_memory=None, *, rng):
    return jax.random.permutation(rng, n).astype(infer_dtype(dtype, 1))
