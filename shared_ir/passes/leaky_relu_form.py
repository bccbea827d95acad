"""`F.leaky_relu(x, a)` as max(x, a·x) for 0 <= a <= 1: MUL and MAXIMUM, two int8 kernels.

litert-torch lowers leaky_relu to GREATER_EQUAL, MUL and SELECT, and neither TFLite-Micro's
int8 kernels nor ai-edge-quantizer's static int8 recipe take that SELECT (edge/mcu/data/tflm_ops.json),
so every LeakyReLU network (darknet/YOLO-style detectors, GAN generators, many audio nets) was
refused on mcu (tests/test_passes_leaky_relu.py). For 0 <= a <= 1, a·x <= x exactly when x >= 0,
so max(x, a·x) is leaky_relu. Exact in float; in int8 the MUL's output has its own scale and the
MAXIMUM requantizes both. Other slopes (above 1 the order flips and MINIMUM, which the quantizer
leaves in float, would take it; below 0 it is not monotonic) are left for the check to report.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewritten_calls

__all__ = ["LeakyReluAsMaximum"]


class LeakyReluAsMaximum:
    name = "leaky-relu-as-maximum"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x = node.args[0]
            slope = float(call_arguments(node)["negative_slope"])
            if not 0 <= slope <= 1:
                return None
            return call_with_val(graph, aten.maximum.default, x, call_with_val(graph, aten.mul.Tensor, x, slope))

        found = call_functions(exported_program, {aten.leaky_relu.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no leaky_relu with a slope in [0, 1]",
            changed="wrote {count} leaky_relu(s) as max(x, a*x)",
        )
