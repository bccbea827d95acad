"""A softmax over an axis other than the last as one over the last, between two transposes:
TRANSPOSE, SOFTMAX, TRANSPOSE.

TFLite's SOFTMAX normalizes the last axis only, so litert-torch's converter writes a softmax over
another axis out as REDUCE_MAX, SUB, EXP, SUM and DIV, which ai-edge-quantizer leaves in float:
HF ConvBERT's span-based dynamic convolution (a softmax over dim 1) stopped its mcu build at the
DEQUANTIZEs around them after a check that passed, and android int8 kept those ops in float.
Attention pooling over a sequence ([B, T, 1], dim 1) and class probabilities of an NCHW map
(dim 1) are written the same way. Exact: values only move.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewritten_calls, static_shapes

__all__ = ["SoftmaxOnTheLastAxis"]


class SoftmaxOnTheLastAxis:
    name = "softmax-on-the-last-axis"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            given = call_arguments(node)
            x, rank = given["self"], given["self"].meta["val"].dim()
            if not static_shapes(x) or rank < 2 or given["dim"] % rank == rank - 1:
                return None
            dim = given["dim"] % rank
            last = given["dtype"] if node.target == aten.softmax.int else given["half_to_float"]
            moved = call_with_val(graph, aten.transpose.int, x, dim, rank - 1)
            normalized = call_with_val(graph, node.target, moved, rank - 1, last)
            return call_with_val(graph, aten.transpose.int, normalized, dim, rank - 1)

        found = call_functions(exported_program, {aten.softmax.int, aten._softmax.default})
        return rewritten_calls(self.name, exported_program, found, rewrite, unchanged="no softmax over another axis than the last",
                               changed="wrote {count} softmax(es) over another axis as one over the last between transposes")
