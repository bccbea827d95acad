"""An `expand` / `expand_as` that only feeds elementwise ops that broadcast anyway is dropped.

    mul(a, expand_as(b, a))                  ->  mul(a, b)        (a: [1, 64, 4, 256], b: [1, 64, 4, 1])
    add(permute(expand(h, s), p), w)          ->  add(permute(h, p), w)

timm's MobileViTv2 attention (`F.relu(value) * context_vector.expand_as(value)`) failed in
litert-torch's converter passes ("'tfl.mul' op operands don't have broadcast-compatible shapes"),
so neither android nor mcu could build it; timm's HaloNet adds two relative-logit tensors that
are each expanded and then permuted (5-D), and the converter refused that ADD the same way.
Broadcasting gives the same values without the materialized copy, which the converter then
never sees. An expand read only through a permute is dropped with the permute moved onto its
source (the size-1 dims move with it). Exact.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import call_functions, finish

__all__ = ["BroadcastInsteadOfExpand"]


def _broadcasts_to(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(small[::-1], big[::-1]))


class BroadcastInsteadOfExpand:
    name = "broadcast-instead-of-expand"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        elementwise = {aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor}
        expands = {aten.expand.default, aten.expand_as.default}

        def users_broadcast(node, shape: tuple[int, ...]) -> bool:
            """Every user of `node` is elementwise and gives its own shape with `node` of `shape`."""
            if not node.users:
                return False
            for user in node.users:
                if user.target not in elementwise or user.kwargs or [a for a in user.args[:2] if a is node] != [node]:
                    return False
                shapes = [
                    shape if a is node else tuple(a.meta["val"].shape) if hasattr(a, "meta") else ()
                    for a in user.args[:2]
                ]
                if tuple(torch.broadcast_shapes(*shapes)) != tuple(user.meta["val"].shape):
                    return False
            return True

        def droppable(node) -> bool:
            source, out = node.args[0], tuple(node.meta["val"].shape)
            if not hasattr(source, "meta") or not _broadcasts_to(tuple(source.meta["val"].shape), out):
                return False
            return users_broadcast(node, tuple(source.meta["val"].shape))

        def permuted_source(node) -> tuple[int, ...] | None:
            """permute(expand(x)) of a same-rank x, the expand read by nothing else: x's permuted shape."""
            expand = node.args[0]
            if (
                getattr(expand, "target", None) not in expands
                or len(expand.users) != 1
                or not hasattr(expand.args[0], "meta")
            ):
                return None
            small = tuple(expand.args[0].meta["val"].shape)
            if len(small) != len(node.args[1]):
                return None
            return tuple(small[d % len(small)] for d in node.args[1])

        found = [n for n in call_functions(exported_program, expands) if droppable(n)]
        through = [
            n
            for n in call_functions(exported_program, {aten.permute.default})
            if (shape := permuted_source(n)) is not None and users_broadcast(n, shape)
        ]
        if not found and not through:
            return exported_program, PassResult(self.name, 0, "no expand that only feeds broadcasting elementwise ops")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        names, permutes = {n.name for n in found}, {n.name for n in through}
        count = 0
        for node in [n for n in graph.nodes if n.name in names]:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            count += 1
        for node in [n for n in graph.nodes if n.name in permutes]:
            expand = node.args[0]
            source = expand.args[0]
            node.args = (source, *node.args[1:])
            node.meta["val"] = source.meta["val"].permute(*node.args[1])
            graph.erase_node(expand)
            count += 1
        return finish(ep), PassResult(
            self.name, count, f"dropped {count} expand(s) feeding broadcasting elementwise ops"
        )
