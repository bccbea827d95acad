"""`addcmul` and `addcdiv` as the MUL, DIV and ADD they compute, which TFLite-Micro runs in int8.

    addcmul(x, a, b, value=v) -> x + (v * a) * b        addcdiv(x, a, b, value=v) -> x + (v * a) / b

ResMLP's affine layers and ConvNeXt-V2's global response normalization write their scale and
shift as one addcmul; TFLite-Micro has no such kernel, and the mcu check refused those models on
it (litert-torch decomposes it for android only after the check). Exact in float but for the
order of the rounding: v * a is computed first, as torch does.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewrite_calls

__all__ = ["AddcmulAsMulAdd"]


class AddcmulAsMulAdd:
    name = "addcmul-as-mul-add"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        combine = {aten.addcmul.default: aten.mul.Tensor, aten.addcdiv.default: aten.div.Tensor}

        def rewrite(graph, node):
            x, a, b = node.args[:3]
            value = call_arguments(node)["value"]
            if value != 1:
                a = call_with_val(graph, aten.mul.Tensor, a, value)
            return call_with_val(graph, aten.add.Tensor, x, call_with_val(graph, combine[node.target], a, b))

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, set(combine)), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no addcmul or addcdiv in the program")
        return ep, PassResult(self.name, count, f"wrote {count} addcmul/addcdiv as MUL or DIV, then ADD")
