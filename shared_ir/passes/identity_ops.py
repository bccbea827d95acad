"""Remove ops that compute the identity in an exported inference graph.

    dropout / feature_dropout / alpha_dropout / feature_alpha_dropout with train=False, and
    their in-place forms (nn.Dropout(inplace=True), as in torchvision's MobileNetV3 and EfficientNet)
    clone, alias, detach, lift_fresh_copy

An eval-mode model keeps its `nn.Dropout` layers as `aten.dropout(x, p, False)`; those and
copies are the identity for a converter that owns its buffers, so they vanish from the IR
instead of being refused by a target that has no kernel named after them. A dropout captured
with train=True (F.dropout(x, training=True) in forward) is random, not the identity: it
stays, and the target's check reports it.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, finish, replace_node
from tpuedge.shared_ir.torch_compat import op_schema

__all__ = ["RemoveIdentityOps"]

_DROPOUTS = ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout")
_COPIES = ("clone", "alias", "detach", "lift_fresh_copy")


def _targets():
    import torch

    aten = torch.ops.aten
    dropouts = {getattr(aten, f"{name}{suffix}").default for name in _DROPOUTS for suffix in ("", "_")}
    copies = {getattr(aten, name).default for name in _COPIES}
    return dropouts, copies


def _mutates(node) -> bool:
    schema = op_schema(node.target)
    return node.op == "call_function" and schema is not None and schema.is_mutable


def _is_identity(node, dropouts) -> bool:
    if node.target not in dropouts:
        # A copy is the identity only while neither side is written in place afterwards
        # (`y = x.clone(); y.add_(1)` must not turn into an update of x).
        source = node.args[0]
        users = list(node.users) + list(getattr(source, "users", ()))
        return not any(_mutates(user) for user in users)
    return call_arguments(node)["train"] is False


class RemoveIdentityOps:
    """`keep_detach=True` for a graph that trains: a detach is the identity of values only."""

    name = "remove-identity-ops"

    def __init__(self, keep_detach: bool = False):
        self.keep_detach = keep_detach

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        dropouts, copies = _targets()
        if self.keep_detach:
            copies = copies - {torch.ops.aten.detach.default}
        found = [n for n in call_functions(exported_program, dropouts | copies) if _is_identity(n, dropouts)]
        if not found:
            return exported_program, PassResult(self.name, 0, "no identity ops in the program")
        ep = copy_program(exported_program)
        names = {n.name for n in found}
        removed: dict[str, int] = {}
        for node in [n for n in ep.graph.nodes if n.name in names]:
            key = node.target.__name__.split(".")[0]
            removed[key] = removed.get(key, 0) + 1
            replace_node(ep, node, node.args[0])
        finish(ep)
        what = ", ".join(f"{k} x{v}" for k, v in sorted(removed.items()))
        return ep, PassResult(
            self.name,
            len(found),
            f"removed {len(found)} identity op(s) (eval-mode dropout, copies): {what}",
            {"removed": removed},
        )
