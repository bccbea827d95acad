"""Per-op numerical tests of the cloud-tpu ATen -> JAX table, GENERATED from the registry.

Every key in `LOWERINGS` has samples here (torch eager vs the lowering, float32 random inputs),
a statistical check (random ops), or, for graph assertions, a check that they have no value;
`test_every_lowering_is_tested` fails when a new lowering arrives without one. Tolerances: float results within
atol=1e-5, rtol=1e-5 unless the sample states more (matmul/conv-like ops 1e-4; accumulated
reductions 2e-5); ints and bools exactly. Gradients (vjp against torch autograd with a random
cotangent) within atol=rtol=1e-4 for every float sample whose op torch can differentiate.
Eager JAX (no jit per op) keeps this file fast.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import math

import numpy as np
import pytest
import torch

from cloud_op_samples import SAMPLES, ASSERTION_OPS, Gen
from tpuedge.cloud.interpreter import host_to_jax
from tpuedge.cloud.lowerings import LOWERINGS, is_random_op, jax_dtype

torch.set_num_threads(1)


# ---- random ops: statistical checks (torch's generator can't be matched) ----------------------
def _check_dropout(fn, key):
    import jax.numpy as jnp

    x = jnp.ones((200, 100), jnp.float32)
    out, mask = fn(x, 0.3, True, rng=key)
    kept = float(np.mean(np.asarray(mask)))
    assert abs(kept - 0.7) < 0.01, kept
    np.testing.assert_allclose(np.asarray(out)[np.asarray(mask)], 1 / 0.7, rtol=1e-6)
    assert float(np.abs(np.asarray(out)[~np.asarray(mask)]).max()) == 0.0
    same, _ = fn(x, 0.3, False, rng=key)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(x))


def _check_uniform(values):
    v = np.asarray(values)
    assert v.min() >= 0 and v.max() < 1 and abs(v.mean() - 0.5) < 0.01 and abs(v.std() - math.sqrt(1 / 12)) < 0.01


def _check_normal(values):
    v = np.asarray(values)
    assert abs(v.mean()) < 0.02 and abs(v.std() - 1) < 0.02


def _ones(*shape):
    import jax.numpy as jnp

    return jnp.ones(shape, jnp.float32)


RANDOM_CHECKS = {
    "aten.native_dropout.default": _check_dropout,
    "aten.bernoulli.p": lambda fn, key: _assert_close(
        float(np.mean(np.asarray(fn(_ones(100, 100), 0.25, rng=key)))), 0.25, 0.01
    ),
    "aten.bernoulli.default": lambda fn, key: _assert_close(
        float(np.mean(np.asarray(fn(_ones(100, 100) * 0.6, rng=key)))), 0.6, 0.01
    ),
    "aten.rand.default": lambda fn, key: _check_uniform(fn([100, 100], rng=key)),
    "aten.randn.default": lambda fn, key: _check_normal(fn([100, 100], rng=key)),
    "aten.rand_like.default": lambda fn, key: _check_uniform(fn(_ones(100, 100), rng=key)),
    "aten.randn_like.default": lambda fn, key: _check_normal(fn(_ones(100, 100), rng=key)),
    "aten.randperm.default": lambda fn, key: np.testing.assert_array_equal(
        np.sort(np.asarray(fn(50, rng=key))), np.arange(50)
    ),
}


def _assert_close(value, want, tol):
    assert abs(value - want) < tol, (value, want)


# ---- the generated tests ---------------------------------------------------------------------
def _torch_op(key: str):
    namespace, name, overload = key.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _to_jax(value):
    if isinstance(value, torch.Tensor):
        return host_to_jax(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_jax(v) for v in value)
    return value


def _leaves(value):
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _compare(key, i, sample, got, want):
    got_leaves, want_leaves = _leaves(got), _leaves(want)
    assert len(got_leaves) == len(want_leaves), f"{key}[{i}]: {len(got_leaves)} outputs, torch gives {len(want_leaves)}"
    for j, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        w = w.detach()
        g = np.asarray(g).astype(jax_dtype(w.dtype))  # the interpreter casts to torch's dtype the same way
        assert tuple(g.shape) == tuple(w.shape), f"{key}[{i}] output {j}: shape {g.shape} vs torch {tuple(w.shape)}"
        if not sample.values:
            continue
        w = w.numpy()
        if w.dtype.kind in "fc":  # float, or complex (an FFT's bins: its sums in another order)
            np.testing.assert_allclose(g, w, atol=sample.atol, rtol=sample.rtol, err_msg=f"{key}[{i}] output {j}")
        else:
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=f"{key}[{i}] output {j}")


# Small graphs compile ~2x faster without LLVM's optimizations; runtime is irrelevant here.
_FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _compiled(f, *args):
    import jax

    return jax.jit(f).lower(*args).compile(compiler_options=_FAST_COMPILE)(*args)


def _call_jitted(fn, j_args, kwargs):
    """fn(*j_args, **kwargs) compiled once, with only the arrays as traced arguments."""
    import jax

    positions = [i for i, a in enumerate(j_args) if isinstance(a, jax.Array)]
    if not positions:
        return fn(*j_args, **kwargs)

    def f(*arrays):
        call = list(j_args)
        for i, a in zip(positions, arrays):
            call[i] = a
        return fn(*call, **kwargs)

    return _compiled(f, *[j_args[i] for i in positions])


def _float_tensor_positions(args):
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dtype.is_floating_point]


def _grad_check(key, i, sample, fn):
    """vjp of the lowering vs torch autograd, cotangent random, on the first float output."""
    import jax

    positions = _float_tensor_positions(sample.args)
    if sample.grad_args is not None:
        positions = [p for p in positions if p in sample.grad_args]
    if not positions:
        return False
    t_args = [a.detach().clone().requires_grad_(True) if k in positions else a for k, a in enumerate(sample.args)]
    out = _torch_op(key)(*t_args, **sample.kwargs)
    first = _leaves(out)[0]
    if not (isinstance(first, torch.Tensor) and first.dtype.is_floating_point and first.requires_grad):
        return False
    cot = torch.randn(first.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(first, [t_args[k] for k in positions], cot, allow_unused=True)

    j_args = [_to_jax(a) for a in sample.args]

    def f(*float_args):
        call = list(j_args)
        for k, v in zip(positions, float_args):
            call[k] = v
        return _leaves(fn(*call, **sample.kwargs))[0]

    def grads_of(cotangent, *primals):
        return jax.vjp(f, *primals)[1](cotangent)

    j_grads = _compiled(grads_of, _to_jax(cot), *[j_args[k] for k in positions])
    for k, tg, jg in zip(positions, grads, j_grads):
        want = np.zeros(sample.args[k].shape, np.float32) if tg is None else tg.numpy()
        np.testing.assert_allclose(np.asarray(jg), want, atol=1e-4, rtol=1e-4, err_msg=f"{key}[{i}] grad of arg {k}")
    return True


NUMERIC_KEYS = sorted(k for k in LOWERINGS.keys() if k in SAMPLES)


def test_every_lowering_is_tested():
    keys = set(LOWERINGS.keys())
    covered = set(SAMPLES) | set(ASSERTION_OPS) | set(RANDOM_CHECKS)
    assert keys - covered == set(), f"lowerings without samples, random checks or skips: {sorted(keys - covered)}"
    assert covered - keys == set(), f"samples for ops that are not registered: {sorted(covered - keys)}"
    assert all(is_random_op(LOWERINGS.lookup(k)) for k in RANDOM_CHECKS)
    assert len(keys) >= 190


@pytest.mark.parametrize("key", NUMERIC_KEYS)
def test_op_matches_torch(key):
    fn = LOWERINGS.lookup(key)
    gen = Gen(key)
    samples = SAMPLES[key](gen)
    grads_checked = 0
    for i, sample in enumerate(samples):
        j_args = [_to_jax(a) for a in sample.args]
        j_kwargs = {k: _to_jax(v) for k, v in sample.kwargs.items()}
        got = _call_jitted(fn, j_args, j_kwargs)  # before torch: some torch ops write into their inputs
        want = _torch_op(key)(*[a.clone() if isinstance(a, torch.Tensor) else a for a in sample.args], **sample.kwargs)
        _compare(key, i, sample, got, want)
        if sample.grad or (sample.grad is None and not grads_checked):
            grads_checked += _grad_check(key, i, sample, fn)
    assert samples


@pytest.mark.parametrize("key", sorted(RANDOM_CHECKS))
def test_random_op_statistics(key):
    import jax

    fn = LOWERINGS.lookup(key)
    RANDOM_CHECKS[key](fn, jax.random.PRNGKey(7))


_TRUE_ASSERTION_ARGS = {  # each assertion op with arguments that hold, for torch and the lowering alike
    "aten._assert_tensor_metadata.default": lambda t: ((t,), {"size": [2, 3], "dtype": torch.float32}),
    "aten._assert_scalar.default": lambda t: ((True, "holds"), {}),
    "aten._assert_async.msg": lambda t: ((torch.tensor(True), "holds"), {}),
    "aten._assert_async.default": lambda t: ((torch.tensor(True),), {}),
}


@pytest.mark.parametrize("key", sorted(ASSERTION_OPS))
def test_an_assertion_op_lowers_to_no_value(key):
    # assertions have no value in torch either; the lowering must not invent one
    args, kwargs = _TRUE_ASSERTION_ARGS[key](torch.zeros(2, 3))
    namespace, name, overload = key.split(".")
    assert getattr(getattr(getattr(torch.ops, namespace), name), overload)(*args, **kwargs) is None
    jax_args = tuple(host_to_jax(a) if isinstance(a, torch.Tensor) else a for a in args)
    assert LOWERINGS.lookup(key)(*jax_args, **kwargs) is None
