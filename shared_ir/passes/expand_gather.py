"""An `expand` whose value reaches a matrix product becomes a gather of constant positions.

Grouped-query attention repeats each key/value head for the query heads that share it (HF's
`repeat_kv`: `k[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)`), and the
product then reads the keys transposed. litert-torch's converter writes the expand as
BROADCAST_TO and, for such a chain, dropped the transpose: the BATCH_MATMUL multiplied q by k,
not by k^T, with no error. HF Qwen3 (q/k RMSNorm before the repeat) converted so in float,
cosine 0.93 against torch, and every android scheme missed its budget; a plain
`q @ k.expand(...).transpose(-1, -2)` does the same. The same values taken as
`index_select(x, dim, [0, 0, ..., 0])` for each grown dim (one GATHER, which the converter
keeps in order, int8 included, and TFLite-Micro runs in int8) convert right. Exact.

Only an expand read, through view/reshape/permute/transpose/clone ops alone, by a matmul, bmm,
baddbmm or scaled_dot_product_attention is rewritten; an expand feeding elementwise ops is
`broadcast-instead-of-expand`'s.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["ExpandAsGather"]

_MAX_HOPS = 8


def _ops():
    import torch

    aten = torch.ops.aten
    shape_ops = {
        aten.view.default,
        aten.reshape.default,
        aten._unsafe_view.default,
        aten.permute.default,
        aten.transpose.int,
        aten.clone.default,
        aten.contiguous.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
    }
    products = {aten.matmul.default, aten.bmm.default, aten.baddbmm.default, aten.scaled_dot_product_attention.default}
    return shape_ops, products


def _reaches_a_product(node, shape_ops, products) -> bool:
    frontier = [node]
    for _ in range(_MAX_HOPS):
        following = []
        for n in frontier:
            for user in n.users:
                if user.op != "call_function":
                    continue
                if user.target in products:
                    return True
                if user.target in shape_ops:
                    following.append(user)
        if not following:
            return False
        frontier = following
    return False


def _rewrite(program, graph, node) -> Any:
    import torch

    x = node.args[0]
    small, big = tuple(x.meta["val"].shape), tuple(node.meta["val"].shape)
    if len(small) != len(big):
        x = call_with_val(graph, torch.ops.aten.view.default, x, [1] * (len(big) - len(small)) + list(small))
        small = (1,) * (len(big) - len(small)) + small
    for dim, (s, b) in enumerate(zip(small, big)):
        if s == 1 and b != 1:
            index = lift_constant(program, f"_{node.name}_dim{dim}", torch.zeros(b, dtype=torch.int64), node)
            x = call_with_val(graph, torch.ops.aten.index_select.default, x, dim, index)
    return x


class ExpandAsGather:
    name = "expand-as-gather"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        shape_ops, products = _ops()
        found = [
            n
            for n in call_functions(exported_program, {torch.ops.aten.expand.default})
            if isinstance(n.meta.get("val"), torch.Tensor) and _reaches_a_product(n, shape_ops, products)
        ]
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            _rewrite,
            with_program=True,
            unchanged="no expand that a matrix product reads",
            changed="wrote {count} expand(s) read by a matrix product as gathers",
        )
