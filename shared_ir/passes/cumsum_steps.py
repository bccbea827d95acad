"""Cumulative sums as log-step shifted additions, which TFLite-Micro runs on int32 and int8.

    cumsum(x, dim)  ->  y = x;  for k = 1, 2, 4, ... < n:  y = y + pad(y[..., :n-k], k zeros before)

HF RoBERTa, XLM-R, MPNet, CamemBERT and the like number positions by `cumsum` over the
non-padding mask (`create_position_ids_from_input_ids`), and TFLite-Micro's CUMSUM takes
float32 only: every such encoder was refused on mcu at the op. After step k each position holds
the sum of the 2k values ending at it (Hillis-Steele), so ceil(log2 n) steps of SLICE, PAD and
ADD give the cumulative sum: exact in integers, float rounding in float. A dim of one element,
or a sum whose length is not static, is left for the check to report.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["CumsumAsShiftedSums"]


def _cast(graph, aten, x, dtype):
    node = graph.call_function(aten._to_copy.default, (x,), {"dtype": dtype})
    node.meta["val"] = x.meta["val"].to(dtype)
    return node


def _cumsum(graph, aten, node):
    x, dim = node.args[0], node.args[1]
    out = node.meta["val"]
    val = x.meta["val"]
    dim = dim % val.dim()
    size = val.shape[dim]
    if not isinstance(size, int) or size < 2:
        return None
    y = x if val.dtype == out.dtype else _cast(graph, aten, x, out.dtype)  # torch sums int32 as int64
    pad_tail = [0, 0] * (val.dim() - 1 - dim)  # constant_pad_nd's pads run from the last dim
    step = 1
    while step < size:
        head = call_with_val(graph, aten.slice.Tensor, y, dim, 0, size - step)
        shifted = call_with_val(graph, aten.constant_pad_nd.default, head, pad_tail + [step, 0], 0)
        y = call_with_val(graph, aten.add.Tensor, y, shifted)
        step *= 2
    return y


class CumsumAsShiftedSums:
    name = "cumsum-as-shifted-sums"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        found = call_functions(exported_program, {aten.cumsum.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            lambda graph, node: _cumsum(graph, aten, node),
            unchanged="no cumulative sum over a static dim in the program",
            changed="wrote {count} cumulative sum(s) as log-step shifted additions (SLICE, PAD, ADD)",
        )
