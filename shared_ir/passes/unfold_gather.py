"""`x.unfold(dim, size, step)` (sliding windows) as one gather of constant positions, then a permute.

litert-torch's converter lowers Tensor.unfold through a PAD of a higher-rank tensor, and
LiteRT's PAD takes at most 5-D: timm's HaloNet unfolds a 4-D map twice (rows, then columns) and
stopped the converter ("'tfl.pad' op failed to verify that operand 0 is at most 5-D").
TFLite-Micro has no lowering for it at all. The windows are the input's own values, so

    unfold(x, d, size, step) = permute(x[..., positions, ...], window axis last)
    positions[i, j] = i * step + j        (i < count = (n - size) // step + 1, j < size)

one GATHER (`aten.index.Tensor` with a constant (count, size) index) and a TRANSPOSE: exact in
float and in int8 (a gather moves values), and a kernel every LiteRT target has.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["UnfoldAsGather"]


def _rewrite(program, graph, node) -> Any:
    import torch

    aten = torch.ops.aten
    x, dim, size, step = node.args[:4]
    shape = x.meta["val"].shape
    rank = len(shape)
    if rank == 0:
        return None  # a 0-d unfold is a reshape; nothing to gather
    dim %= rank
    count = (shape[dim] - size) // step + 1
    positions = torch.arange(count, dtype=torch.int64)[:, None] * step + torch.arange(size, dtype=torch.int64)[None, :]
    index = lift_constant(program, f"_{node.name}_windows", positions, x)
    windows = call_with_val(graph, aten.index.Tensor, x, [None] * dim + [index])  # (..., count, size, ...)
    order = [*range(dim + 1), *range(dim + 2, rank + 1), dim + 1]
    return call_with_val(graph, aten.permute.default, windows, order)


class UnfoldAsGather:
    name = "unfold-as-gather"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        found = call_functions(exported_program, {torch.ops.aten.unfold.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            _rewrite,
            with_program=True,
            unchanged="no Tensor.unfold in the program",
            changed="wrote {count} Tensor.unfold(s) as gathers of window positions",
        )
