"""L2 normalization as a product with RSQRT, never a division by the norm.

    x / clamp_min(norm(x, 2, dims, keepdim=True), eps)  ->  x * rsqrt(clamp_min(sum(x * x, dims), eps * eps))
    x / norm(x, 2, dims, keepdim=True)                  ->  x * rsqrt(sum(x * x, dims))

(`F.normalize` and the `x / x.norm(dim=-1, keepdim=True)` of embedding heads; an `expand_as`
of the divisor may sit between.) In int8 the division is the trap: LiteRT's DIV kernel refuses
to run when a divisor element rounds to its zero point, and a norm's range starts at 0, so any
vector shorter than half a quantization step stops the model ("div.cc: data[i] != zero_point",
EdgeNeXt's cross-covariance attention on photos). RSQRT of a value that rounds to 0 saturates
instead, and both LiteRT and TFLite-Micro run it in int8. In float the rewrite is exact to
rounding: for a norm above eps, 1/max(|x|, eps) = rsqrt(max(|x|^2, eps^2)).
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewrite_calls

__all__ = ["NormalizeAsRsqrt"]


def _norm_of(divisor: Any, aten) -> tuple[Any, list[int], float | None] | None:
    """(x, dims, eps) when `divisor` is [expand of] [clamp_min of] a keepdim 2-norm of x."""
    node = divisor
    if getattr(node, "target", None) in (aten.expand.default, aten.expand_as.default):
        node = node.args[0]
    eps = None
    if getattr(node, "target", None) == aten.clamp_min.default and isinstance(node.args[1], (int, float)):
        node, eps = node.args[0], float(node.args[1])
    if getattr(node, "target", None) != aten.linalg_vector_norm.default:
        return None
    given = call_arguments(node)
    x, order, dims, keepdim = given["self"], given["ord"], given["dim"], given["keepdim"]
    if order != 2 or not keepdim or given["dtype"] is not None:
        return None
    return x, list(range(x.meta["val"].dim())) if dims is None else list(dims), eps


class NormalizeAsRsqrt:
    name = "normalize-as-rsqrt"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            found = _norm_of(node.args[1], aten)
            if found is None or found[0] is not node.args[0]:
                return None  # a division by anything else, or by another tensor's norm
            x, dims, eps = found
            squares = call_with_val(
                graph, aten.sum.dim_IntList, call_with_val(graph, aten.mul.Tensor, x, x), dims, True
            )
            if eps is not None:
                squares = call_with_val(graph, aten.clamp_min.default, squares, eps * eps)
            return call_with_val(graph, aten.mul.Tensor, x, call_with_val(graph, aten.rsqrt.default, squares))

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.div.Tensor}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no division of a tensor by its own 2-norm")
        return ep, PassResult(
            self.name, count, f"wrote {count} L2 normalization(s) as x * rsqrt(sum(x*x)) (no DIV by the norm)"
        )
