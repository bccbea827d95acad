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
from tpuedge.shared_ir.passes import PassResult, copy_program

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
        gelus = [
            n for n in exported_program.graph.nodes if n.op == "call_function" and n.target in (aten.gelu.default, aten.gelu_.default)
        ]
        if not gelus:
            return exported_program, PassResult(self.name, 0, "no GELU in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        names = {n.name for n in gelus}
        for node in [n for n in graph.nodes if n.name in names]:
            x = node.args[0]
            before = set(graph.nodes)
            with graph.inserting_before(node):
                out = self._emit(graph, aten, x)
            for new in (n for n in graph.nodes if n not in before):
                new.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack", "source_fn_stack")})
                new.meta["val"] = node.meta.get("val")
            node.replace_all_uses_with(out)
            graph.erase_node(node)
        graph.lint()
        ep.graph_module.recompile()
        return ep, PassResult(
            self.name,
            len(gelus),
            f"rewrote {len(gelus)} GELU op(s) as {self.formula()} (TFLite-Micro has no GELU kernel)",
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

