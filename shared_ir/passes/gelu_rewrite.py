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

__all__ = ["GeluRewrite", "GELU_FORMS"]

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
        cube = call(aten.mul.Tensor, (call(aten.mul.Tensor, (x, x)), x))
        inner = call(aten.add.Tensor, (x, call(aten.mul.Tensor, (cube, _TANH_CUBIC))))
        t = call(aten.tanh.default, (call(aten.mul.Tensor, (inner, _TANH_SCALE)),))
        half_x = call(aten.mul.Tensor, (x, 0.5))
        return call(aten.mul.Tensor, (half_x, call(aten.add.Tensor, (t, 1.0))))

