"""Powers, square roots and 2-norms as products and RSQRT, which TFLite-Micro runs in int8.

    x ** 2, square(x) -> x * x        x ** 3 -> x * x * x        x ** 1 -> x        x ** -0.5 -> rsqrt(x)
    sqrt(x), x ** 0.5 -> x * rsqrt(max(x, 1e-30))        x ** 0.25, x ** 0.75 -> from sqrt(sqrt(x)) and sqrt(x)
    linalg_vector_norm(x, 2, dims) -> sqrt(sum(x * x, dims))         (F.normalize, embeddings)

TFLM has no POW kernel and its SQRT kernel takes no int8 tensors, and litert-torch lowers a
2-norm through ABS, which ai-edge-quantizer leaves in float: so a spectrogram magnitude
(silero-vad's sqrt(re**2 + im**2)) or an embedding model's F.normalize blocked every mcu build.
x * rsqrt(x) is sqrt(x) for x > 0 and 0 at 0 (the floor keeps rsqrt finite); in float the
rewrite is exact to rounding. Other exponents and norms stay, and the check reports them.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewrite_calls

__all__ = ["PowersAsProducts"]

_FLOOR = 1e-30  # rsqrt's argument floor: finite in float32 (rsqrt 1e15), and x * rsqrt stays 0 at x = 0


def _sqrt(graph, aten, x):
    floored = call_with_val(graph, aten.clamp_min.default, x, _FLOOR)
    return call_with_val(graph, aten.mul.Tensor, x, call_with_val(graph, aten.rsqrt.default, floored))


def _power(graph, aten, x, exponent):
    """The replacement of x ** exponent, or None to leave it."""
    if exponent == 1:
        return x
    if exponent in (2, 3):
        square = call_with_val(graph, aten.mul.Tensor, x, x)
        return square if exponent == 2 else call_with_val(graph, aten.mul.Tensor, square, x)
    if exponent == 0.5:
        return _sqrt(graph, aten, x)
    if exponent == -0.5:
        return call_with_val(graph, aten.rsqrt.default, x)
    if exponent in (0.25, 0.75):  # LocalResponseNorm's default beta: sqrt(x) * sqrt(sqrt(x))
        fourth = _sqrt(graph, aten, _sqrt(graph, aten, x))
        return fourth if exponent == 0.25 else call_with_val(graph, aten.mul.Tensor, _sqrt(graph, aten, x), fourth)
    return None


def _norm(graph, aten, node):
    given = call_arguments(node)
    x, order, dims, keepdim = given["self"], given["ord"], given["dim"], given["keepdim"]
    if order != 2 or given["dtype"] is not None:
        return None
    dims = list(range(x.meta["val"].dim())) if dims is None else list(dims)
    squares = call_with_val(graph, aten.mul.Tensor, x, x)
    return _sqrt(graph, aten, call_with_val(graph, aten.sum.dim_IntList, squares, dims, bool(keepdim)))


class PowersAsProducts:
    name = "powers-as-products"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        kinds = {
            aten.pow.Tensor_Scalar: "pow",
            aten.sqrt.default: "sqrt",
            aten.linalg_vector_norm.default: "2-norm",
            aten.square.default: "square",
        }  # square: MetaFormer's StarReLU, relu(x) ** 2
        rewritten: dict[str, int] = {}

        def rewrite(graph, node):
            if node.target == aten.sqrt.default:
                out = _sqrt(graph, aten, node.args[0])
            elif node.target == aten.pow.Tensor_Scalar:
                out = _power(graph, aten, node.args[0], node.args[1])
            elif node.target == aten.square.default:
                out = _power(graph, aten, node.args[0], 2)
            else:
                out = _norm(graph, aten, node)
            if out is not None:  # None: an exponent or norm with no int8 form here, left for the check to report
                kind = kinds[node.target] if node.target != aten.pow.Tensor_Scalar else f"x**{node.args[1]:g}"
                rewritten[kind] = rewritten.get(kind, 0) + 1
            return out

        found = call_functions(exported_program, set(kinds))
        if not found:
            return exported_program, PassResult(self.name, 0, "no powers, square roots or norms in the program")
        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no power, square root or 2-norm it can rewrite")
        what = ", ".join(f"{k} x{v}" for k, v in sorted(rewritten.items()))
        return ep, PassResult(
            self.name,
            count,
            f"wrote powers, square roots and 2-norms as MUL/RSQRT: {what}",
            {"rewritten": rewritten},
        )
