"""`aten.silu(x)` as x * sigmoid(x): the two int8 ops the converter lowers it to, on the IR.

litert-torch lowers SiLU (swish, EfficientNet's activation) to LOGISTIC then MUL, so a strict
int8 model holds the sigmoid as an int8 tensor of its own, on the fixed grid TFLite's LOGISTIC
kernel imposes (scale 1/256). As one IR node that tensor is invisible: the int8 decision on the
IR (`quantize.activation_ranges.quant_points`) gives it no point, quantization-aware training
does not fake its rounding, and per-layer verify cannot place it. Written out, each int8 tensor
of the flatbuffer has its IR node. Exact in float; the converted builtins are the same.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, rewritten_calls

__all__ = ["SiluAsSigmoidMul"]


class SiluAsSigmoidMul:
    name = "silu-as-sigmoid-mul"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            gate = graph.call_function(aten.sigmoid.default, (node.args[0],))
            return graph.call_function(aten.mul.Tensor, (node.args[0], gate))

        # not `silu_`: one on a value nothing else reads was written out of place before this
        # pass (in-place-as-out-of-place); one left writes through a view, and as a new value
        # the write was lost (wrong numbers, no error); functionalization handles it
        found = call_functions(exported_program, {aten.silu.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no silu in the program",
            changed="wrote {count} silu(s) as x * sigmoid(x) (int8 LOGISTIC, MUL)",
        )
