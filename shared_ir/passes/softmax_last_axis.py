"""A softmax over an axis other than the last as one over the last, between two transposes:
TRANSPOSE, SOFTMAX, TRANSPOSE.

TFLite's SOFTMAX normalizes the last axis only, so litert-torch's converter writes a softmax over
another axis out as REDUCE_MAX, SUB, EXP, SUM and DIV, which ai-edge-quantizer leaves in float:
HF ConvBERT's span-based dynamic convolution (a softmax over dim 1) stopped its mcu build at the
DEQUANTIZEs around them after a check that passed, and android int8 kept those ops in float.
Attention pooling over a sequence ([B, T, 1], dim 1) and class probabilities of an NCHW map
(dim 1) are written the same way.

A 4-D softmax already over the last axis is written out too when it normalizes a convolution's
output: litert-torch's layout pass runs that region in NHWC and moves the softmax's axis with it
(NCHW's last, W, is NHWC's axis 2). MobileViTV2's linear attention normalizes its 1x1
convolution's query over the patches that way (HF's and timm's: 12 DEQUANTIZEs stopped HF's mcu
build), as does a spatial softmax over W. Such a softmax runs on the tensor reshaped to 3-D
([N, C*H, W]), which the layout pass leaves alone. A 4-D softmax fed by a matrix product
(attention scores) stays as it is: that region stays NCHW. Exact: values only move.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.op_registry import op_key
from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    rewritten_calls,
    static_shapes,
)

__all__ = ["SoftmaxOnTheLastAxis"]


class SoftmaxOnTheLastAxis:
    name = "softmax-on-the-last-axis"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch
        from torch.export.graph_signature import InputKind

        aten = torch.ops.aten

        def rewrite(graph, node):
            given = call_arguments(node)
            x, rank = given["self"], given["self"].meta["val"].dim()
            last = given["dtype"] if node.target == aten.softmax.int else given["half_to_float"]
            if not static_shapes(x) or rank < 2:
                return None
            dim = given["dim"] % rank
            if dim == rank - 1:
                if rank != 4 or not _fed_by_convolutions(x, user_inputs):
                    return None
                n, c, h, w = x.meta["val"].shape
                flat = call_with_val(graph, aten.reshape.default, x, [n, c * h, w])
                normalized = call_with_val(graph, node.target, flat, 2, last)
                return call_with_val(graph, aten.reshape.default, normalized, [n, c, h, w])
            moved = call_with_val(graph, aten.transpose.int, x, dim, rank - 1)
            normalized = call_with_val(graph, node.target, moved, rank - 1, last)
            return call_with_val(graph, aten.transpose.int, normalized, dim, rank - 1)

        user_inputs = {
            spec.arg.name for spec in exported_program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT
        }
        found = call_functions(exported_program, {aten.softmax.int, aten._softmax.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no softmax over another axis than the last",
            changed="wrote {count} softmax(es) over another axis as one over the last between transposes, or "
            "a convolution's over its last axis at 3-D",
        )


# ops a 4-D tensor leaves litert-torch's NHWC region by (its layout changes, or a matrix product
# reads it); a walk back from a softmax stops at them
_LAYOUT_BREAKS = frozenset(
    f"aten.{op}"
    for op in (
        "matmul",
        "bmm",
        "mm",
        "linear",
        "view",
        "reshape",
        "_unsafe_view",
        "permute",
        "transpose",
        "expand",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "scaled_dot_product_attention",
    )
)
_IMAGE_OPS = frozenset(
    f"aten.{op}"
    for op in ("conv2d", "convolution", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "max_pool2d_with_indices")
)
_WALK = 12  # nodes looked at: a softmax is a few elementwise ops from the convolution that feeds it


def _fed_by_convolutions(node: Any, user_inputs: set[str]) -> bool:
    """Whether a walk back from `node` through 4-D tensors, before any op in _LAYOUT_BREAKS,
    reaches a convolution or a pool (or a 4-D model input, which mcu and --channels-last take in
    NHWC): the region litert-torch's layout pass runs in NHWC."""
    seen, todo = set(), [node]
    while todo and len(seen) < _WALK:
        current = todo.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        if current.op == "placeholder":
            if current.name in user_inputs:
                return True
            continue
        if current.op != "call_function":
            continue
        op = op_key(current.target).rsplit(".", 1)[0]  # "aten.conv2d.default" -> "aten.conv2d"
        if op in _IMAGE_OPS:
            return True
        if op in _LAYOUT_BREAKS:
            continue
        todo.extend(a for a in current.all_input_nodes if getattr(a.meta.get("val"), "ndim", None) in (4, None))
    return False
