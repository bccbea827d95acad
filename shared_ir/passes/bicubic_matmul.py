"""A bicubic resize (`F.interpolate(..., mode="bicubic")`) as two products with constant matrices.

    y = interpolate(x, (H', W'), bicubic)  ->  y = M_h^T . x . M_w    (per image and channel)

torch's bicubic resize is separable: along each axis every output is a fixed cubic combination of
(index-clamped) inputs, so each axis is one constant (n_in, n_out) matrix, read off by resizing
the identity with the same options. TFLite-Micro has no bicubic kernel (only bilinear and
nearest), and the mcu check refused timm's CrossViT, which resizes its input for one branch, and
super-resolution nets' bicubic skip connections. Each product is a FULLY_CONNECTED over the
last axis (a TRANSPOSE brings H there): exact in float to rounding; the matrices weigh
n_in x n_out each (CrossViT's 240 -> 224: 53,760 int8 weights an axis).
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    rewritten_calls,
    static_shapes,
)

__all__ = ["BicubicAsMatmuls"]

MAX_MATRIX = 1 << 20  # elements of one axis's matrix (4 MB in float): beyond it the resize stays, for the check


def _axis_matrix(n_in: int, n_out: int, align_corners: bool, scale, dtype):
    """(n_in, n_out): row j is what the resize makes of the j-th unit signal along one axis."""
    import torch

    eye = torch.eye(n_in, dtype=torch.float64).reshape(n_in, 1, 1, n_in)
    if scale is None:
        out = torch.ops.aten.upsample_bicubic2d.vec(eye, [1, n_out], align_corners, None)
    else:  # the scale, not the sizes' ratio, places the samples when it is given
        out = torch.ops.aten.upsample_bicubic2d.vec(eye, None, align_corners, [1.0, float(scale)])
    return out.reshape(n_in, n_out).to(dtype)


def _along_last(program, graph, aten, x, matrix, name: str):
    """x (..., n_in) times the constant (n_in, n_out) matrix: one FULLY_CONNECTED."""
    shape = list(x.meta["val"].shape)
    weight = lift_constant(program, name, matrix, x)
    flat = call_with_val(graph, aten.reshape.default, x, [-1, shape[-1]])
    product = call_with_val(graph, aten.mm.default, flat, weight)
    return call_with_val(graph, aten.reshape.default, product, shape[:-1] + [matrix.shape[1]])


def _rewrite(program, graph, node) -> Any:
    import torch

    aten = torch.ops.aten
    x, _, align_corners = node.args[:3]
    scales = call_arguments(node)["scale_factors"]
    val = x.meta["val"]
    if not static_shapes(x, node):
        return None
    (h, w), (h2, w2) = val.shape[-2:], node.meta["val"].shape[-2:]
    if val.dim() != 4 or not val.dtype.is_floating_point or max(h * h2, w * w2) > MAX_MATRIX:
        return None
    scale_h, scale_w = scales or [None, None]
    across = _along_last(
        program, graph, aten, x, _axis_matrix(w, w2, align_corners, scale_w, val.dtype), f"_{node.name}_columns"
    )
    turned = call_with_val(graph, aten.transpose.int, across, 2, 3)
    down = _along_last(
        program, graph, aten, turned, _axis_matrix(h, h2, align_corners, scale_h, val.dtype), f"_{node.name}_rows"
    )
    return call_with_val(graph, aten.transpose.int, down, 2, 3)


class BicubicAsMatmuls:
    name = "bicubic-as-matmuls"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        found = call_functions(exported_program, {torch.ops.aten.upsample_bicubic2d.vec})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            _rewrite,
            with_program=True,
            unchanged="no bicubic resize it can rewrite",
            changed="wrote {count} bicubic resize(s) as two products with constant matrices",
        )
