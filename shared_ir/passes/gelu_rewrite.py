"""Rewrite `aten.gelu` into ops every int8 runtime has (TFLite-Micro has no GELU kernel).

    sigmoid form: x * sigmoid(1.702 x)                                  (3 ops: MUL, LOGISTIC, MUL)
    tanh form:    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))      (closer to exact GELU, more ops)

Both replace exact and tanh-approximate GELU alike. The rewrite changes the model's function
slightly; the caller measures and reports what it cost against the original program.
"""

from __future__ import annotations

import math
from typing import Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, rewrite_calls

__all__ = ["GeluRewrite", "GELU_FORMS", "TanhGeluArrangement"]

GELU_FORMS = ("sigmoid", "tanh")
_SIGMOID_SCALE = 1.702
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


class GeluRewrite:
    """Pass: every `aten.gelu` node -> the chosen TFLM-friendly approximation."""

    def __init__(self, form: str = "sigmoid"):
        if form not in GELU_FORMS:
            raise UserError(f"Unknown GELU rewrite form {form!r}; choose one of: {', '.join(GELU_FORMS)}.")
        self.form = form
        self.name = f"gelu-to-{form}"

    def formula(self) -> str:
        return "x*sigmoid(1.702*x)" if self.form == "sigmoid" else "0.5*x*(1+tanh(0.79788*(x+0.044715*x^3)))"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        gelus = call_functions(exported_program, {aten.gelu.default, aten.gelu_.default})
        ep, count = rewrite_calls(exported_program, gelus, lambda graph, node: self._emit(graph, aten, node.args[0]))
        if not count:
            return exported_program, PassResult(self.name, 0, "no GELU in the program")
        return ep, PassResult(
            self.name,
            count,
            f"rewrote {count} GELU op(s) as {self.formula()} (TFLite-Micro has no GELU kernel)",
            {"formula": self.formula()},
        )

    def _emit(self, graph, aten, x):
        call = graph.call_function
        if self.form == "sigmoid":
            gate = call(aten.sigmoid.default, (call(aten.mul.Tensor, (x, _SIGMOID_SCALE)),))
            return call(aten.mul.Tensor, (x, gate))
        t = call(aten.tanh.default, (_tanh_argument(graph, aten, x),))
        half_x = call(aten.mul.Tensor, (x, 0.5))
        return call(aten.mul.Tensor, (half_x, call(aten.add.Tensor, (t, 1.0))))


def _tanh_argument(graph, aten, x):
    """sqrt(2/pi) (x + 0.044715 x^3), arranged as x * sqrt(2/pi) * (1 + 0.044715 x*x).

    The converter fuses the textbook arrangement (with its 0.5 x (1 + tanh(...)) around it) back
    into one GELU op, which TFLite-Micro has no kernel for; it leaves this one as TANH, MUL, ADD."""
    call = graph.call_function
    poly = call(aten.add.Tensor, (call(aten.mul.Tensor, (call(aten.mul.Tensor, (x, x)), _TANH_CUBIC)), 1.0))
    return call(aten.mul.Tensor, (call(aten.mul.Tensor, (x, _TANH_SCALE)), poly))


class TanhGeluArrangement:
    """Pass: a tanh-approximate GELU written out in ops (GPT-2's `gelu_new`, ALBERT's default),
    `tanh(sqrt(2/pi) * (x + 0.044715 * x**3))`, gets the tanh argument arranged as
    `_tanh_argument` does. The same function (to float rounding); without it the converter
    fuses the ops into a GELU op and the mcu build refuses the model."""

    name = "tanh-gelu-arrangement"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x = _textbook_tanh_gelu_input(node.args[0], aten)
            return None if x is None else graph.call_function(aten.tanh.default, (_tanh_argument(graph, aten, x),))

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.tanh.default}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no written-out tanh GELU in the program")
        return ep, PassResult(
            self.name, count, f"arranged {count} written-out tanh GELU(s) so the converter keeps them as TANH, MUL, ADD"
        )


def _scaled(node, aten, value: float):
    """`y` when `node` is y * value (either operand order, within 1e-4 relative), else None."""
    import torch

    if not isinstance(node, torch.fx.Node) or node.target != aten.mul.Tensor or len(node.args) != 2:
        return None
    for y, c in (node.args, node.args[::-1]):
        if isinstance(y, torch.fx.Node) and isinstance(c, (int, float)) and abs(c - value) <= 1e-4 * value:
            return y
    return None


def _is_cube_of(node, x, aten) -> bool:
    """node is x**3: pow(x, 3), or (x*x)*x in either order."""
    import torch

    if not isinstance(node, torch.fx.Node):
        return False
    if node.target == aten.pow.Tensor_Scalar:
        return node.args[0] is x and node.args[1] == 3
    if node.target != aten.mul.Tensor or len(node.args) != 2:
        return False
    a, b = node.args

    def is_square(n):
        return isinstance(n, torch.fx.Node) and n.target == aten.mul.Tensor and list(n.args) == [x, x]

    return (a is x and is_square(b)) or (b is x and is_square(a))


def _textbook_tanh_gelu_input(arg, aten):
    """x when `arg` is sqrt(2/pi) * (x + 0.044715 * x**3) (operands in either order), else None."""
    import torch

    inner = _scaled(arg, aten, _TANH_SCALE)
    if inner is None or inner.target != aten.add.Tensor or len(inner.args) != 2:
        return None
    for x, term in (inner.args, inner.args[::-1]):
        cube = _scaled(term, aten, _TANH_CUBIC)
        if isinstance(x, torch.fx.Node) and cube is not None and _is_cube_of(cube, x, aten):
            return x
    return None
