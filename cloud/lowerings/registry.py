"""The cloud-tpu ATen -> JAX table and the small helpers every lowering uses.

A lowering takes the node's arguments as torch wrote them (tensors arrive as jax arrays,
dtypes as `torch.dtype`, ints/floats/lists as Python values) and returns jax arrays (a tuple
or list for multi-output ops). Ops that draw random numbers are marked with `@random_op` and
receive a `rng=` key from the interpreter; everything else is a pure function of its inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.shared_ir.op_registry import OpRegistry

__all__ = ["LOWERINGS", "lowering", "random_op", "is_random_op", "jax_dtype", "default_float", "normalize_dim"]

LOWERINGS = OpRegistry("cloud-tpu")
lowering = LOWERINGS.register


def random_op(fn: Callable) -> Callable:
    """Mark a lowering that needs a PRNG key (`rng=` keyword) from the interpreter."""
    fn.needs_rng = True
    return fn


def is_random_op(fn: Any) -> bool:
    return bool(getattr(fn, "needs_rng", False))


_TORCH_TO_NUMPY = {
    "torch.float32": np.float32,
    "torch.float16": np.float16,
    "torch.bfloat16": jnp.bfloat16,
    "torch.float64": np.float64,
    "torch.int8": np.int8,
    "torch.int16": np.int16,
    "torch.int32": np.int32,
    "torch.int64": np.int64,
    "torch.uint8": np.uint8,
    "torch.bool": np.bool_,
    "torch.complex64": np.complex64,  # an FFT's result (a spectrogram in forward)
}


def jax_dtype(torch_dtype: Any) -> Any:
    """The jax dtype for a torch dtype, canonicalized: int64 -> int32 and float64 -> float32
    unless `jax_enable_x64` is on (the interpreter checks int64 inputs fit before narrowing)."""
    if torch_dtype is None:
        return None
    key = str(torch_dtype)
    if key not in _TORCH_TO_NUMPY:
        from tpuedge.shared_ir.errors import UserError

        raise UserError(f"cloud-tpu has no JAX dtype for {key}; cast the model and inputs to float32, int32 or bool.")
    return jax.dtypes.canonicalize_dtype(_TORCH_TO_NUMPY[key])


def default_float() -> Any:
    return jnp.float32


def normalize_dim(dim: int, ndim: int) -> int:
    """torch allows dim=-1 on 0-d tensors; map any dim into [0, max(ndim, 1))."""
    return dim % max(ndim, 1)
