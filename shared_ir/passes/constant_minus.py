"""A constant minus a convolution's output computed as the negated output plus the constant.

Measured (tests/test_passes_constant_minus.py): LiteRT's converter folds `c - conv(x)` into the
convolution's bias as if it were `conv(x) - c`, so the float model returns the negation plus an
offset; `1.0 - conv(x)`, `buffer - depthwise(x)`, `1.0 - relu(conv(x))` all convert without an
error and all are wrong (largest difference 2 to 6 on unit-scale outputs; the peer,
`litert_torch.convert`, ships the same wrong model). `-conv(x) + c` converts correctly. The pass
rewrites the subtraction where its right operand is a convolution's output, directly or through
the ops the converter fuses into one (activations, batch norm, arithmetic with a constant):
`rsub(y, c)` (Python's `c - y`) and `sub(constant, y)` become `add(neg(y), c)`, which is exact.
Other subtractions (`1.0 - attention_mask`, GRU gates) are left as they are.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import constant_values
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["ConstantMinusAsNegAdd"]


def _op_sets():
    import torch

    aten = torch.ops.aten
    convolutions = {aten.conv1d.default, aten.conv2d.default, aten.conv3d.default, aten.convolution.default,
                    aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input}
    activations = {aten.relu.default, aten.relu6.default, aten.hardtanh.default, aten.clamp.default,
                   aten._native_batch_norm_legit_no_training.default, aten.batch_norm.default}
    arithmetic = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.add.Scalar,
                  aten.sub.Scalar, aten.mul.Scalar, aten.div.Scalar}
    return convolutions, activations, arithmetic


def _from_convolution(node, constants: set[str]) -> bool:
    """Whether `node` is a convolution's output, or one the converter may fold into it."""
    import operator

    import torch

    convolutions, activations, arithmetic = _op_sets()
    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        if node.target in convolutions:
            return True
        if node.target is operator.getitem:  # batch norm's (output, mean, var)
            node = node.args[0]
        elif node.target in activations:
            node = node.args[0]
        elif node.target in arithmetic:
            tensors = [a for a in node.args[:2] if isinstance(a, torch.fx.Node) and a.name not in constants]
            if len(tensors) != 1:
                return False
            node = tensors[0]
        else:
            return False
    return False


class ConstantMinusAsNegAdd:
    name = "constant-minus-as-neg-add"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        constants = set(constant_values(exported_program)) | {
            spec.arg.name for spec in exported_program.graph_signature.input_specs
            if spec.kind == torch.export.graph_signature.InputKind.PARAMETER}

        def is_constant(arg) -> bool:
            return not isinstance(arg, torch.fx.Node) or arg.name in constants

        def operands(node):  # (the constant, the computed tensor) of `constant - tensor`, else None
            alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
            if alpha != 1:
                return None
            if node.target in (aten.rsub.Scalar, aten.rsub.Tensor):
                tensor, constant = node.args[:2]
            else:
                constant, tensor = node.args[:2]
            if not isinstance(tensor, torch.fx.Node) or not is_constant(constant):
                return None
            if not tensor.meta["val"].is_floating_point() or not _from_convolution(tensor, constants):
                return None
            return constant, tensor

        found = [n for n in call_functions(exported_program, {aten.rsub.Scalar, aten.rsub.Tensor, aten.sub.Tensor})
                 if operands(n) is not None]

        def rewrite(graph, node):
            constant, tensor = operands(node)
            return call_with_val(graph, aten.add.Tensor, call_with_val(graph, aten.neg.default, tensor), constant)

        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no constant minus a convolution's output")
        return ep, PassResult(self.name, count, f"computed {count} constant-minus-convolution(s) as -y + c")
