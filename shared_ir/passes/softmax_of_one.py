"""A softmax over an axis of size 1 is a tensor of ones.

At a small input size an attention stage can hold one token (HF LeViT's last stage at 64x64,
HF MobileViT at 64x64): its softmax runs over one key. litert-torch's converter writes that
softmax out as REDUCE_MAX, SUB, EXP, SUM and DIV instead of one SOFTMAX, and ai-edge-quantizer
leaves those float, so the mcu build refused both models ("DEQUANTIZE ... TFLite-Micro runs only
integer graphs"). Every entry of such a softmax is exp(0) / exp(0) = 1, whatever the input
(finite or not), so it becomes a constant of ones of its shape and dtype. Exact.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["SoftmaxOfOne"]


def _over_one(node) -> bool:
    import torch

    val, out, dim = node.args[0].meta.get("val"), node.meta.get("val"), node.args[1]
    return (
        val is not None
        and val.dim() > 0
        and val.shape[dim % val.dim()] == 1
        and getattr(out, "dtype", None) == torch.float32
    )  # aten.full's default dtype


def _rewrite(graph, node) -> Any:
    import torch

    val = node.meta["val"]
    return call_with_val(graph, torch.ops.aten.full.default, list(val.shape), 1.0)


class SoftmaxOfOne:
    name = "softmax-of-one"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        found = [n for n in call_functions(exported_program, {aten.softmax.int, aten._softmax.default}) if _over_one(n)]
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            _rewrite,
            unchanged="no softmax over an axis of size 1",
            changed="wrote {count} softmax(es) over an axis of size 1 as ones",
        )
