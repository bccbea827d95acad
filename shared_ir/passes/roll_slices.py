"""`torch.roll` as slices and a concatenation per rolled dim, which TFLite-Micro runs in int8.

    roll(x, s, dim)  ->  cat([x[..., n-s:], x[..., :n-s]], dim)      (s taken mod n; 0: no op)

Swin's shifted windows roll the feature map by half a window each way (torchvision's swin_t,
timm's swin_*), and TFLite-Micro has no ROLL: the check refused those models on mcu at the op,
not at the size that is their real answer there. Slices and a concatenation move values and
compute nothing: exact in float and int8. A roll without dims (over the flattened tensor) is
left for the check to report.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewritten_calls

__all__ = ["RollAsSlices"]


def _roll(graph, aten, node):
    given = call_arguments(node)
    x, shifts, dims = given["self"], given["shifts"], given["dims"]
    shifts, dims = (
        list(shifts) if isinstance(shifts, (list, tuple)) else [shifts],
        list(dims) if isinstance(dims, (list, tuple)) else [dims],
    )
    if not dims or len(shifts) != len(dims):
        return None
    y = x
    for shift, dim in zip(shifts, dims):
        rank = y.meta["val"].dim()
        dim = dim % rank
        size = y.meta["val"].shape[dim]
        if not isinstance(size, int) or not isinstance(shift, int):
            return None
        s = shift % size
        if s == 0:
            continue
        tail = call_with_val(graph, aten.slice.Tensor, y, dim, size - s, size)
        head = call_with_val(graph, aten.slice.Tensor, y, dim, 0, size - s)
        y = call_with_val(graph, aten.cat.default, [tail, head], dim)
    if y is x:  # every shift a multiple of its dim: the same tensor
        return call_with_val(graph, aten.clone.default, x)
    return y


class RollAsSlices:
    name = "roll-as-slices"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        found = call_functions(exported_program, {aten.roll.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            lambda graph, node: _roll(graph, aten, node),
            unchanged="no roll over named dims in the program",
            changed="wrote {count} roll(s) as slices + concatenation (TFLite-Micro has no ROLL)",
        )
