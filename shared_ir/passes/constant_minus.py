"""A constant minus a computed tensor written as the negated tensor plus the constant.

Measured (tests/test_passes_constant_minus.py, and a sweep of such forms through the android
float build): litert-torch converts `c - y` as `y - c`, without an error, wherever y comes out of
its NHWC layout region: `1.0 - conv(x)`, `buffer - depthwise(x)`, `c - relu(bn(conv(x)))`,
`3.0 - avg_pool2d(x, 2)` (on the input itself), `3.0 - interpolate(conv(x))`, `- pad(...)`,
`- conv(x).permute(0, 2, 3, 1)`; the peer, `litert_torch.convert`, ships the same wrong float
model. Elsewhere (after a Linear, a mean, a max-pool, a flatten) it converts right. `-y + c`
converts right everywhere it was measured: an addition's operands commute, so the order the
converter gets wrong does not matter. Every `c - y` (`rsub`, `sub(constant, y)`) of a floating
y is rewritten, which is exact; the int8 cost is a MUL by -1 (the converter's NEG) where a SUB
was. `c / y` has the same fault (docs/android.md) and no exact rewrite that avoids it.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.alpha_scale import alpha_of
from tpuedge.shared_ir.passes.constant_fold import constant_values
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["ConstantMinusAsNegAdd"]


class ConstantMinusAsNegAdd:
    name = "constant-minus-as-neg-add"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        constants = set(constant_values(exported_program)) | {
            spec.arg.name
            for spec in exported_program.graph_signature.input_specs
            if spec.kind == torch.export.graph_signature.InputKind.PARAMETER
        }

        def is_constant(arg) -> bool:
            return not isinstance(arg, torch.fx.Node) or arg.name in constants

        def operands(node):  # (the constant, the computed tensor) of `constant - tensor`, else None
            if alpha_of(node) != 1:  # litert_ir_passes runs AlphaAsMul first
                return None
            if node.target in (aten.rsub.Scalar, aten.rsub.Tensor):
                tensor, constant = node.args[:2]
            else:
                constant, tensor = node.args[:2]
            if not isinstance(tensor, torch.fx.Node) or not is_constant(constant):
                return None
            if tensor.name in constants or not tensor.meta["val"].is_floating_point():
                return None
            return constant, tensor

        found = [
            n
            for n in call_functions(exported_program, {aten.rsub.Scalar, aten.rsub.Tensor, aten.sub.Tensor})
            if operands(n) is not None
        ]

        def rewrite(graph, node):
            constant, tensor = operands(node)
            return call_with_val(graph, aten.add.Tensor, call_with_val(graph, aten.neg.default, tensor), constant)

        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no constant minus a computed tensor",
            changed="computed {count} constant-minus-tensor(s) as -y + c",
        )
