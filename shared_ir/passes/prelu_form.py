"""`aten.prelu(x, w)` as relu(x) + w * min(x, 0): exact, and no duplicated layer before it.

litert-torch decomposes PReLU as relu(x) - w * relu(-x). When x comes from a Linear (or a
convolution), the TFLite converter fuses the first RELU into that layer and folds the `-x` of
the second branch into a SECOND copy of the layer with negated weights: a PReLU after a
576x128 Linear stores the 73,728 weights twice (a 100k-parameter MTCNN R-Net came out at
1.75x its parameter bytes in int8). min(x, 0) is not linear, so nothing folds into the layer:
the layer is stored once, and the slope stays one per-channel constant ([C, 1, ...], never
broadcast to the activation's shape). Exact in float: for x > 0 it is x + w*0, else 0 + w*x.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["PReluAsMinimum"]


class PReluAsMinimum:
    name = "prelu-as-minimum"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, weight = node.args[0], node.args[1]
            x_val, w_val = x.meta["val"], weight.meta["val"]
            # torch's PReLU: one slope per channel (dim 1), or one for all
            shape = [w_val.numel()] + [1] * (x_val.dim() - 2) if w_val.numel() > 1 else [1]
            slope = call_with_val(graph, aten.reshape.default, weight, shape)
            positive = graph.call_function(aten.relu.default, (x,))
            negative = graph.call_function(aten.sub.Tensor, (x, positive))  # min(x, 0)
            scaled = graph.call_function(aten.mul.Tensor, (negative, slope))
            return graph.call_function(aten.add.Tensor, (positive, scaled))

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.prelu.default}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no PReLU in the program")
        return ep, PassResult(
            self.name, count, f"wrote {count} PReLU(s) as relu(x) + w*min(x, 0) (no layer duplicated by the converter)"
        )
