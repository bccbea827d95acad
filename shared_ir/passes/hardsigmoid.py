"""`aten.hardsigmoid(x)` as relu6(x + 3) * (1/6): its definition, in ops TFLite-Micro runs in int8.

TFLite has no HARD_SIGMOID builtin, and litert-torch's lowering of a lone hardsigmoid leaves a
RELU6 that ai-edge-quantizer keeps in float, so MobileNetV3's squeeze-excitation gates (9 of
them in mobilenet_v3_small) blocked every mcu build. Written as add -> hardtanh(0, 6) -> mul,
the clamp fuses into the ADD (or into the conv before it, with the +3 folded into its bias):
exact in float, and every op has an int8 kernel.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, rewrite_calls

__all__ = ["HardSigmoidAsRelu6"]


class HardSigmoidAsRelu6:
    name = "hardsigmoid-as-relu6"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            shifted = graph.call_function(aten.add.Tensor, (node.args[0], 3.0))
            clamped = graph.call_function(aten.hardtanh.default, (shifted, 0.0, 6.0))
            return graph.call_function(aten.mul.Tensor, (clamped, 1.0 / 6.0))

        found = call_functions(exported_program, {aten.hardsigmoid.default, aten.hardsigmoid_.default})
        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no hardsigmoid in the program")
        return ep, PassResult(
            self.name, count, f"wrote {count} hardsigmoid(s) as relu6(x + 3) / 6 (int8 ADD with fused RELU6, MUL)"
        )
