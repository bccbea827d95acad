"""An assignment into a slice of a computed value (`a[:, :, 1:, 1:] = v`, `a[:, 0] = 0.5`) as a
concatenation: the value with that slice replaced, read by everything after the assignment (a
write of the whole value, `a[:, 0:] = v`, which export keeps as a copy_ into `a`, is `v` itself).

    a = f(x); a[:, 1:] = v; y = g(a)    ->    a = f(x); b = cat([a[:, :1], v], 1); y = g(b)

torch.export keeps such writes as `copy_` (or `fill_`) into a chain of slice/select views of the
value, and the mcu check refused them by name (timm's MViTv2 adds its relative positions into
`attn[:, :, 1:, 1:]`); TFLite-Micro has no scatter kernel. Each view of the chain becomes one
CONCATENATION of the untouched slices and the new part, innermost first: exact (values move).
Only where that is the whole story: the value is computed in the graph (not an input, parameter
or buffer) and is no view, each view of the chain feeds only the next, steps are 1, the write
keeps the dtype, and no other view of the value taken before the write is read after it.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_with_val,
    finish,
    is_view,
    rename_output_specs,
    static_shapes,
)

__all__ = ["SliceAssignmentAsConcat"]


def _chain(dst, aten) -> tuple[Any, list] | None:
    """(the value written into, [(dim, start, end, selected)] from it down to `dst`), or None."""
    steps = []
    node = dst
    while node.op == "call_function" and node.target in (aten.slice.Tensor, aten.select.int):
        if len(node.users) != 1:
            return None
        source = node.args[0]
        if not static_shapes(source):
            return None
        size = source.meta["val"].shape
        given = call_arguments(node)
        dim = given["dim"] % len(size)
        if node.target == aten.select.int:
            index = given["index"] % size[dim]
            steps.append((dim, index, index + 1, True))
        else:
            if given["step"] != 1:
                return None
            start, end, _ = slice(given["start"], given["end"]).indices(size[dim])
            steps.append((dim, start, max(start, end), False))
        node = source
    base = node  # no view at all: a write of the whole value (timm's `attn[:, :, 0:, 0:] = ...`)
    if base.op != "call_function" or base.target is operator.getitem or is_view(base):
        return None
    return base, steps[::-1]


def _read_after(node, moment: int, order: dict) -> bool:
    """Whether `node`, or a view taken of it, is read by a node after `moment`."""
    return any(
        order.get(u, moment + 1) > moment or (u.op == "call_function" and is_view(u) and _read_after(u, moment, order))
        for u in node.users
    )


def _written_part(ep, graph, aten, node, shape, dtype):
    """The values the copy_/fill_ `node` writes, as a tensor of the view's `shape`."""
    import torch

    if node.target == aten.fill_.Scalar:
        return lift_constant(
            ep, f"_{node.name}_value", torch.full(tuple(shape), node.args[1], dtype=dtype), node.args[0]
        )
    source = node.args[1]
    if source.meta["val"].dtype != dtype:
        return None
    return (
        source
        if tuple(source.meta["val"].shape) == tuple(shape)
        else call_with_val(graph, aten.expand.default, source, list(shape))
    )


def _replaced(graph, aten, base, steps, part):
    """`base` with the part the view chain `steps` reads replaced by `part`."""
    views = [base]
    for dim, start, end, selected in steps[:-1]:  # the chain's views, read fresh from base
        views.append(
            call_with_val(graph, aten.select.int, views[-1], dim, start)
            if selected
            else call_with_val(graph, aten.slice.Tensor, views[-1], dim, start, end)
        )
    for view, (dim, start, end, selected) in zip(views[::-1], steps[::-1]):
        if selected:  # a select drops the dim: the part gets it back, size 1
            part = call_with_val(graph, aten.unsqueeze.default, part, dim)
        size = view.meta["val"].shape[dim]
        pieces = (
            ([call_with_val(graph, aten.slice.Tensor, view, dim, 0, start)] if start > 0 else [])
            + [part]
            + ([call_with_val(graph, aten.slice.Tensor, view, dim, end, size)] if end < size else [])
        )
        part = call_with_val(graph, aten.cat.default, pieces, dim) if len(pieces) > 1 else part
    return part


class SliceAssignmentAsConcat:
    name = "slice-assignment-as-concat"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        writes = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor}
        if not any(n.op == "call_function" and n.target in writes for n in exported_program.graph.nodes):
            return exported_program, PassResult(self.name, 0, "no assignment into a slice in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        order = {n: i for i, n in enumerate(graph.nodes)}
        count = 0
        for node in [n for n in graph.nodes if n.op == "call_function" and n.target in writes]:
            found = _chain(node.args[0], aten)
            if found is None or (node.users and found[1]):  # a write into a view that is read back: left
                continue
            base, steps = found
            moment = order[node]
            if any(
                u.op == "call_function"
                and is_view(u)
                and order[u] < moment
                and u is not _first_view(node.args[0], base)
                and _read_after(u, moment, order)
                for u in base.users
            ):
                continue  # an earlier view of the value is read after the write: it would see the write
            view = node.args[0].meta["val"]
            before = set(graph.nodes)
            with graph.inserting_before(node):
                part = _written_part(ep, graph, aten, node, view.shape, view.dtype)
                new = None if part is None else _replaced(graph, aten, base, steps, part)
            added = [n for n in graph.nodes if n not in before]
            if new is None:
                for n in reversed(added):
                    graph.erase_node(n)
                continue
            for n in added:
                order[n] = moment
                n.meta.setdefault("stack_trace", node.meta.get("stack_trace"))
            for written in (base, node):  # later readers of the value, and of the write's own result
                for user in [u for u in written.users if u is not node and order.get(u, -1) > moment]:
                    user.replace_input_with(written, new)
                    if user.op == "output":
                        rename_output_specs(ep, written.name, new.name)
            graph.erase_node(node)
            count += 1
        if not count:
            return exported_program, PassResult(self.name, 0, "no assignment into a slice it can rewrite")
        finish(ep)
        return ep, PassResult(self.name, count, f"wrote {count} assignment(s) into a slice as concatenations")


def _first_view(dst, base):
    """The view of the chain that reads `base` itself (None: the write is into `base` whole)."""
    if dst is base:
        return None
    node = dst
    while node.args[0] is not base:
        node = node.args[0]
    return node
