"""An `expand` / `expand_as` that only feeds elementwise ops that broadcast anyway is dropped.

    mul(a, expand_as(b, a))  ->  mul(a, b)        (a: [1, 64, 4, 256], b: [1, 64, 4, 1])

timm's MobileViTv2 attention (`F.relu(value) * context_vector.expand_as(value)`) failed in
litert-torch's converter passes ("'tfl.mul' op operands don't have broadcast-compatible shapes"),
so neither android nor mcu could build it. Broadcasting gives the same values without the
materialized copy, which the converter then never sees. Exact.
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

        def droppable(node) -> bool:
            source, out = node.args[0], tuple(node.meta["val"].shape)
            if not hasattr(source, "meta") or not node.users:
                return False
            if not _broadcasts_to(tuple(source.meta["val"].shape), out):
                return False
            for user in node.users:  # without it, each user's operands must still broadcast to the expanded shape
                if user.target not in elementwise or user.kwargs or [a for a in user.args[:2] if a is node] != [node]:
                    return False
                shapes = [tuple((source if a is node else a).meta["val"].shape) if hasattr(a, "meta") else () for a in user.args[:2]]
                if tuple(torch.broadcast_shapes(*shapes)) != tuple(user.meta["val"].shape):
                    return False
            return True

        found = [n for n in call_functions(exported_program, expands) if droppable(n)]
        if not found:
            return exported_program, PassResult(self.name, 0, "no expand that only feeds broadcasting elementwise ops")
        ep = copy_program(exported_program)
        names = {n.name for n in found}
        count = 0
        for node in [n for n in ep.graph_module.graph.nodes if n.name in names]:
            node.replace_all_uses_with(node.args[0])
            ep.graph_module.graph.erase_node(node)
            count += 1
        return finish(ep), PassResult(self.name, count, f"dropped {count} expand(s) feeding broadcasting elementwise ops")
