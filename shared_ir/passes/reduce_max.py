"""A max over a dimension (`torch.amax`, `x.max(dim).values`) as halving MAXIMUMs of slices.

    amax(x, d) -> m = maximum(x[:h], x[h:2h]) (and the odd element), again on m, ... (h = n // 2)

TFLite-Micro's REDUCE_MAX takes no int8 tensors (tests/test_tflm_ops.py measures it), so
max-over-time pooling (text and audio CNNs' `x.max(dim=-1)`), Hiera's query pooling and VOLO's
class attention were refused on mcu. ceil(log2 n) MAXIMUMs of slices take the same values:
exact in float and in int8 (a max picks one of its inputs, all on one scale). A max whose
indices are read (argmax) is left for the check to report.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    rewritten_calls,
    static_shapes,
)

__all__ = ["ReduceMaxAsMaximum"]


def _max_along(graph, aten, x, dim: int):
    """max of `x` along `dim`, that dim kept at size 1."""
    n = x.meta["val"].shape[dim]
    while n > 1:
        half = n // 2
        m = call_with_val(
            graph,
            aten.maximum.default,
            call_with_val(graph, aten.slice.Tensor, x, dim, 0, half),
            call_with_val(graph, aten.slice.Tensor, x, dim, half, 2 * half),
        )
        if n % 2:  # the odd last element, broadcast against the halves' maxima
            m = call_with_val(graph, aten.maximum.default, m, call_with_val(graph, aten.slice.Tensor, x, dim, n - 1, n))
        x, n = m, half
    return x


class ReduceMaxAsMaximum:
    name = "reduce-max-as-maximum"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x = node.args[0]
            val = x.meta["val"]
            if not static_shapes(x):
                return None
            given = call_arguments(node)
            keepdim = given["keepdim"]
            if node.target == aten.max.dim:
                if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in node.users):
                    return None  # its indices are read
                for unread in [u for u in node.users if u.args[1] != 0]:
                    graph.erase_node(unread)
                dims = [given["dim"]]
            else:
                dims = list(given["dim"]) or list(range(val.dim()))  # amax(x): every dim
            if val.dim() == 0 or any(val.shape[d] == 0 for d in dims):
                return None
            dims = sorted({d % val.dim() for d in dims})
            out = x
            for d in dims:
                out = _max_along(graph, aten, out, d)
            if not keepdim:
                out = call_with_val(
                    graph, aten.reshape.default, out, [s for i, s in enumerate(val.shape) if i not in dims]
                )
            return (out, None) if node.target == aten.max.dim else out

        found = call_functions(exported_program, {aten.amax.default, aten.max.dim})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no max over a dimension it can rewrite",
            changed="wrote {count} max(es) over a dimension as halving MAXIMUMs of slices",
        )
