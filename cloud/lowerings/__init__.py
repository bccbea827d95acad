"""The cloud-tpu ATen -> JAX lowering table (`LOWERINGS`), one module per family of ops.

`LOWERINGS.lookup(node.target)` is what the interpreter, `tpuedge check --target cloud-tpu`
and `tpuedge ops --target cloud-tpu` all use. `NOT_LOWERED` says, as data, why the core-ATen
ops without a lowering have none.
"""

from __future__ import annotations

from tpuedge.cloud.lowerings import creation, elementwise, nn, pooling, random, reductions, shape  # noqa: F401 (register)
from tpuedge.cloud.lowerings.registry import LOWERINGS, is_random_op, jax_dtype

__all__ = ["LOWERINGS", "NOT_LOWERED", "is_random_op", "jax_dtype"]

_BACKWARD = "a backward op: JAX differentiates the lowered forward, so captured backward graphs are not lowered"
_DYNAMIC = "its output shape depends on tensor values; XLA needs static shapes (use a fixed-size formulation, e.g. torch.where)"
_SYMBOLIC = "symbolic shapes: cloud-tpu lowers static shapes only; export without dynamic_shapes"

NOT_LOWERED: dict[str, str] = {
    "aten._adaptive_avg_pool2d_backward.default": _BACKWARD,
    "aten.avg_pool2d_backward.default": _BACKWARD,
    "aten.convolution_backward.default": _BACKWARD,
    "aten.embedding_dense_backward.default": _BACKWARD,
    "aten.max_pool2d_with_indices_backward.default": _BACKWARD,
    "aten.native_group_norm_backward.default": _BACKWARD,
    "aten.native_layer_norm_backward.default": _BACKWARD,
    "aten.nonzero.default": _DYNAMIC,
    "aten._local_scalar_dense.default": "reads a tensor value into Python (.item()); not traceable under jax.jit",
    "aten._embedding_bag.default": "not lowered yet; use nn.Embedding followed by a sum/mean over the bag",
    "aten.col2im.default": "not lowered yet (nn.Fold); express it with reshapes and pads",
    "aten.grid_sampler_2d.default": "not lowered yet (F.grid_sample)",
    "aten.atan2.out": "out= variants are not functional; torch.export removes them",
    "aten.sym_numel.default": _SYMBOLIC,
    "aten.sym_size.int": _SYMBOLIC,
    "aten.sym_storage_offset.default": _SYMBOLIC,
    "aten.sym_stride.int": _SYMBOLIC,
    "aten.sym_is_contiguous.default": _SYMBOLIC,
    "aten.resize_.default": "an in-place resize of storage; functional programs never need it (use reshape/new tensors)",
}
