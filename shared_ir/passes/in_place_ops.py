"""In-place ops on a private value become their out-of-place forms.

    y = linear(x); y.mul_(2.0); z = relu(y)     ->     y = linear(x); m = mul(y, 2.0); z = relu(m)

torch.export keeps in-place ATen ops on intermediate values (`y += 1`, `y.mul_(s)`, ConViT's
`attn /= attn.sum(-1, keepdim=True)`). litert-torch functionalizes them while converting, but the
mcu check looks ops up by name, so `aten.mul_` / `aten.div_` were refused though `aten.mul` /
`aten.div` run, and the IR rewrites that match an op (clamps, powers) never saw the in-place
form. Each such op becomes the out-of-place overload, and every later reader of the value it
wrote reads the new node instead: the same dataflow. Only where that is the whole story: the
written value is computed in the graph (not an input, parameter or buffer), is no view (or the
only view of such a value, through views nothing else reads) and has no view taken of it, and
the out-of-place result keeps its dtype (an in-place op keeps the
operand's dtype where the out-of-place one may promote). Anything else is left as it was.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import (
    finish,
    is_view,
    rename_output_specs,
    replace_node,
    written_argument_indices,
)
from tpuedge.shared_ir.torch_compat import is_op_overload, op_name_parts, op_schema

__all__ = ["InPlaceAsOutOfPlace"]


def _out_of_place(target) -> Any:
    """aten.mul_.Tensor -> aten.mul.Tensor (None where torch has no such overload)."""
    import torch

    name = op_name_parts(target)[1]
    if target.namespace != "aten" or not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, op_name_parts(target)[2], None) if packet is not None else None


def _aliases(node) -> bool:
    """`node` is a view of something, or something views it."""
    return is_view(node) or any(u.op == "call_function" and is_view(u) for u in node.users)


def _sole_view_of_private_value(node) -> bool:
    """`node` is a view nothing else views, down a chain of views each the only reader of the one
    before, to a value computed in the graph: a write into it is seen only through `node` (HF
    Funnel's `positional_attn *= cls_mask`, positional_attn a slice of a gather)."""
    import torch

    if not is_view(node) or any(u.op == "call_function" and is_view(u) for u in node.users):
        return False
    source = node.args[0]
    while isinstance(source, torch.fx.Node) and len(source.users) == 1:
        if source.op != "call_function" or source.target is operator.getitem:
            return False
        if not is_view(source):
            return True
        source = source.args[0]
    return False


def _rewritable(node) -> Any:
    import torch

    target = node.target
    if node.op != "call_function" or not is_op_overload(target) or not op_schema(target).is_mutable:
        return None
    functional = _out_of_place(target)
    written = written_argument_indices(target)
    operand = node.args[0] if node.args else None
    if functional is None or written != [0] or not isinstance(operand, torch.fx.Node) or operand.op != "call_function":
        return None
    if operand.target is operator.getitem:  # an item of split/unbind/chunk is a view of their input
        return None
    if (_aliases(operand) and not _sole_view_of_private_value(operand)) or not hasattr(
        operand.meta.get("val"), "dtype"
    ):
        return None
    return functional


class InPlaceAsOutOfPlace:
    name = "in-place-as-out-of-place"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        from torch.fx.node import map_arg

        if not any(_rewritable(n) is not None for n in exported_program.graph.nodes):
            return exported_program, PassResult(self.name, 0, "no in-place op on a private value")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        order = {n: i for i, n in enumerate(graph.nodes)}
        rewritten: dict[str, int] = {}
        for node in list(graph.nodes):
            functional = _rewritable(node)
            if functional is None:
                continue
            operand = node.args[0]
            fake = map_arg((node.args, node.kwargs), lambda a: a.meta["val"])
            value = functional(*fake[0], **fake[1])
            if value.dtype != operand.meta["val"].dtype:
                continue  # out of place it would promote: not the same op
            with graph.inserting_before(node):
                new = graph.call_function(functional, node.args, node.kwargs)
            new.meta.update(node.meta)
            new.meta["val"] = value
            order[new] = order[node]
            # the readers after the write read what it wrote (the in-place node's own readers too)
            for user in [u for u in operand.users if u is not node and u is not new and order.get(u, -1) > order[node]]:
                user.replace_input_with(operand, new)
                if user.op == "output":
                    rename_output_specs(ep, operand.name, new.name)
            replace_node(ep, node, new)
            key = str(functional).removeprefix("aten.")
            rewritten[key] = rewritten.get(key, 0) + 1
        if not rewritten:
            return exported_program, PassResult(self.name, 0, "no in-place op on a private value")
        finish(ep)
        what = ", ".join(f"{k} x{v}" for k, v in sorted(rewritten.items()))
        return ep, PassResult(
            self.name, sum(rewritten.values()), f"wrote in-place ops out of place: {what}", {"rewritten": rewritten}
        )
