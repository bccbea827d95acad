"""A gather by constant aranges (`x[arange(B)[:, None], arange(K)]`) as the view it is.

HF transformers build their attention masks with `padding_mask[batch_idx, kv_idx]`, where both
index tensors are broadcast `arange`s: the result is the mask itself, reshaped and broadcast.
Captured, it is an `aten.index.Tensor` over a bool tensor, which litert-torch lowers to
GATHER_ND, and TFLite-Micro's GATHER_ND takes only float32 and int8 data: every BERT-style
encoder failed on mcu there. When each index is `arange(x.shape[k])` along its own axis of the
broadcast index shape (axes in order), the gather is `x.view(...).expand(...)`: exact, no data
moved, for any dtype.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["ConstantIndexAsView", "arange_view_shape"]


def arange_view_shape(indices: list, source_shape: tuple[int, ...]) -> tuple[list[int], list[int]] | None:
    """(view shape, expanded shape) when `x[indices]` is `x.view(view).expand(expanded)`, else None.

    `indices`: integer tensors indexing the leading dims of a tensor of `source_shape`."""
    import torch

    if not indices or any(i.dtype in (torch.bool, torch.uint8) or i.is_floating_point() for i in indices):
        return None
    try:
        broadcast = torch.broadcast_tensors(*indices)
    except RuntimeError:
        return None
    shape = list(broadcast[0].shape)
    view = [1] * len(shape)
    last_axis = -1
    for k, index in enumerate(broadcast):
        n = source_shape[k]
        if n == 1:
            if bool((index != 0).any()):
                return None
            continue
        axis = _arange_axis(index, n)
        if axis is None or axis <= last_axis:
            return None
        view[axis], last_axis = n, axis
    rest = list(source_shape[len(indices) :])
    return view + rest, shape + rest


def _arange_axis(index, n: int) -> int | None:
    """The axis along which `index` runs 0..n-1 (constant along every other axis), or None."""
    import torch

    for axis, size in enumerate(index.shape):
        if size != n:
            continue
        expected = torch.arange(n, dtype=index.dtype).view([n if a == axis else 1 for a in range(index.dim())])
        if bool((index == expected.expand(index.shape)).all()):
            return axis
    return None


class ConstantIndexAsView:
    name = "constant-index-as-view"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        from tpuedge.shared_ir.passes.constant_fold import constant_values

        aten = torch.ops.aten
        constants = constant_values(exported_program)

        def rewrite(graph, node):
            source, indices = node.args[0], node.args[1]
            if any(i is None or i.name not in constants for i in indices):
                return None
            val = source.meta.get("val")
            if val is None or not val.is_contiguous():
                return None
            shapes = arange_view_shape([constants[i.name] for i in indices], tuple(val.shape))
            if shapes is None:
                return None
            view, expanded = shapes
            out = call_with_val(graph, aten.view.default, source, view)
            return out if view == expanded else call_with_val(graph, aten.expand.default, out, expanded)

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.index.Tensor}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no gather by constant aranges in the program")
        return ep, PassResult(self.name, count, f"wrote {count} gather(s) by constant aranges as view + expand")
