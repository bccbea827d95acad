"""`torch.add(x, y, alpha=a)` and its kin as a plain add of `y * a`.

Measured (tests/test_passes_alpha_scale.py): litert-torch's lowerings of aten.add.Tensor and
aten.sub.Tensor take no `alpha` argument, so `torch.add(x, y, alpha=2)`, `torch.sub(...,
alpha=...)` and `torch.rsub(..., alpha=...)` stop an android or mcu build with an internal
error (a TypeError inside the converter). The pass moves the factor onto the operand it scales:
add/sub(x, y, alpha=a) -> add/sub(x, y * a) and rsub(x, c, alpha=a) -> rsub(x * a, c), which
torch computes in one step, so the result can differ by float rounding.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewritten_calls

__all__ = ["AlphaAsMul", "alpha_of"]


def alpha_of(node):
    """The `alpha` of an add / sub / rsub node (1 when not given)."""
    return call_arguments(node)["alpha"]


class AlphaAsMul:
    name = "alpha-as-mul"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        reversed_ops = {aten.rsub.Scalar, aten.rsub.Tensor}  # c - alpha * x: the factor scales the first
        targets = {aten.add.Tensor, aten.sub.Tensor, aten.add.Scalar, aten.sub.Scalar} | reversed_ops
        found = [n for n in call_functions(exported_program, targets) if alpha_of(n) != 1]

        def scaled(graph, operand, alpha):
            if isinstance(operand, torch.fx.Node):
                return call_with_val(graph, aten.mul.Tensor, operand, alpha)
            return operand * alpha

        def rewrite(graph, node):
            first, second = node.args[:2]
            alpha = alpha_of(node)
            if node.target in reversed_ops:
                return call_with_val(graph, node.target, scaled(graph, first, alpha), second)
            return call_with_val(graph, node.target, first, scaled(graph, second, alpha))

        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no add or subtract with an alpha",
            changed="moved alpha onto its operand in {count} add(s)/subtract(s)",
        )
