"""`nn.RMSNorm` / `F.rms_norm` as x · rsqrt(mean(x²) + eps) · weight.

RMSNorm (Llama-style blocks, modern small speech and language models) is captured as one
`aten.rms_norm`, which TFLite-Micro's check has no entry for, so mcu refused every such model
(tests/test_passes_rms_norm.py). Written out it is MUL, MEAN, ADD, RSQRT and MUL, each with an int8
kernel and recipe, and torch's formula (eps defaults to the dtype's machine epsilon). Exact in
float up to the order of the sums.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["RmsNormAsRsqrt"]


class RmsNormAsRsqrt:
    name = "rms-norm-as-rsqrt"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, shape = node.args[0], list(node.args[1])
            given = dict(zip(("weight", "eps"), node.args[2:]), **node.kwargs)
            eps = given.get("eps")
            eps = torch.finfo(x.meta["val"].dtype).eps if eps is None else float(eps)
            dims = list(range(-len(shape), 0))
            mean_square = call_with_val(graph, aten.mean.dim, call_with_val(graph, aten.mul.Tensor, x, x), dims, True)
            scale = call_with_val(graph, aten.rsqrt.default, call_with_val(graph, aten.add.Tensor, mean_square, eps))
            out = call_with_val(graph, aten.mul.Tensor, x, scale)
            weight = given.get("weight")
            return out if weight is None else call_with_val(graph, aten.mul.Tensor, out, weight)

        return rewritten_calls(
            self.name,
            exported_program,
            call_functions(exported_program, {aten.rms_norm.default}),
            rewrite,
            unchanged="no RMSNorm",
            changed="wrote {count} RMSNorm(s) as x * rsqrt(mean(x^2) + eps) * weight",
        )
