"""`F.glu(x, dim)` as a * sigmoid(b), a and b the two halves of x along dim: STRIDED_SLICE,
LOGISTIC, MUL, each with an int8 kernel in TFLite-Micro.

Speech models gate their convolutions with GLU (HF Speech2Text's subsampler, Conformer's
convolution module, wav2letter); mcu had no lowering for aten.glu and refused them
(tests/test_passes_glu.py). Exact in float.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    rewritten_calls,
    static_shapes,
)

__all__ = ["GluAsSigmoidMul"]


class GluAsSigmoidMul:
    name = "glu-as-sigmoid-mul"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            given = call_arguments(node)
            x = given["self"]
            if not static_shapes(x):
                return None
            shape = x.meta["val"].shape
            dim = given["dim"] % len(shape)
            half = shape[dim] // 2
            a = call_with_val(graph, aten.slice.Tensor, x, dim, 0, half)
            b = call_with_val(graph, aten.slice.Tensor, x, dim, half, 2 * half)
            return call_with_val(graph, aten.mul.Tensor, a, call_with_val(graph, aten.sigmoid.default, b))

        found = call_functions(exported_program, {aten.glu.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no glu in the program",
            changed="wrote {count} glu(s) as a * sigmoid(b) (STRIDED_SLICE, LOGISTIC, MUL)",
        )
