"""Fold subgraphs that depend on no input into constants.

Exported models often compute constants at run time: HF transformers build position ids with
`gather` over a buffer and mask patterns with `arange`/`new_ones`/`ge`, all independent of the
model's inputs. A target with no kernel for those ops should not refuse the model for them.
This pass evaluates every deterministic ATen op whose operands are all constants (buffers that
are never mutated, lifted constants, or ops with no tensor operand like `arange`) and replaces
the frontier of that constant subgraph with lifted constants (CONSTANT_TENSOR inputs). In-place
ops are evaluated as eager torch runs them, through views (`_evaluate`), and leave the graph.

Parameters are never folded (they stay weights, for quantization), and a fold that would
materialize a large tensor from small ones (an `expand` to a big shape) is not made.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import finish, is_mutating, is_view, replace_node, written_operands
from tpuedge.shared_ir.torch_compat import is_op_overload, op_schema

__all__ = ["FoldConstants", "MAX_FOLDED_ELEMENTS", "lift_constant", "constant_values"]

# a folded constant may hold up to this many elements, or as many as its largest constant operand
MAX_FOLDED_ELEMENTS = 1 << 16


def constant_values(ep) -> dict[str, Any]:
    """Placeholder name -> value, for every input of `ep` that is a constant (a parameter, an
    unmutated buffer, a lifted constant)."""
    from torch.export.graph_signature import InputKind

    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    values = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.BUFFER and spec.target not in mutated:
            values[spec.arg.name] = (
                ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            )
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            values[spec.arg.name] = ep.constants[spec.target]
    return values


def _foldable_op(node) -> bool:
    """A deterministic ATen op returning a tensor, pure or in place (writing its operands)."""
    import torch

    target = node.target
    return (
        is_op_overload(target)
        and target.namespace == "aten"
        and torch.Tag.nondeterministic_seeded not in target.tags
        and (not op_schema(target).is_mutable or op_schema(target).name.endswith("_"))
        and _tensors(node.meta.get("val"))
    )


def _tensors(value) -> bool:
    """A tensor, or a list or tuple of them (meshgrid, split, unbind)."""
    import torch

    if isinstance(value, (list, tuple)):
        return bool(value) and all(isinstance(v, torch.Tensor) for v in value)
    return isinstance(value, torch.Tensor)


def _size(value) -> int:
    return sum(v.numel() for v in value) if isinstance(value, (list, tuple)) else value.numel()


def _shape_only_fill(node) -> Any:
    """The fill value of an op whose result reads only its operand's shape and dtype (Swin's
    `x.new_zeros((H, W))` for its shifted-window mask, then filled in place), else None."""
    import torch

    aten = torch.ops.aten
    val = node.meta.get("val")
    if (
        node.op != "call_function"
        or not isinstance(val, torch.Tensor)
        or not all(isinstance(d, int) for d in val.shape)
    ):
        return None
    if node.target in (aten.new_zeros.default, aten.zeros_like.default):
        return 0
    if node.target in (aten.new_ones.default, aten.ones_like.default):
        return 1
    if node.target in (aten.new_full.default, aten.full_like.default):
        fill = node.args[2] if node.target == aten.new_full.default else node.args[1]
        return fill if isinstance(fill, (int, float, bool)) else None
    return None


def _storage_roots(ep) -> dict[str, str]:
    """node -> the node whose storage it is, by the ops' schemas: a view's and an in-place op's
    result are their first operand's storage, and so is an item of a multi-output op's result
    (split's chunks are views of its input). An alias-annotated op that copies, as `contiguous`
    may, counts as a view: that only folds less."""
    import torch

    root: dict[str, str] = {}
    for node in ep.graph.nodes:
        first = node.args[0] if node.args else None
        aliases = node.op == "call_function" and (is_view(node) or is_mutating(node) or node.target is operator.getitem)
        root[node.name] = (
            root.get(first.name, first.name) if aliases and isinstance(first, torch.fx.Node) else node.name
        )
    return root


def _evaluate(ep) -> tuple[dict[str, Any], dict[str, Any]]:
    """(node name -> value, for every node computable from constants alone; node name -> the
    value the first reader outside them saw, for those such a reader reads).

    Evaluated as eager torch runs the graph, in order: a view shares its base's storage and an
    in-place op writes through it. HF BEiT builds its relative position index that way
    (`coords[:, :, 0] += k` on views of one tensor, then `index[1:, 1:] = ...`); folding each
    node on its own copy lost the writes, and leaving the writes in the graph left `check` with
    copy_/fill_ on mcu. A storage is not folded where an op this pass does not evaluate writes
    it, or where two readers outside would see it at different values: the evaluation starts
    again without it."""
    root = _storage_roots(ep)
    excluded: set[str] = set()
    while True:
        values, seen, stale = _evaluate_once(ep, root, excluded)
        if not stale:
            return values, seen
        excluded |= stale


def _evaluate_once(ep, root: dict[str, str], excluded: set[str]):
    import torch
    from torch.fx.node import map_arg

    # an in-place write never reaches the program's own buffers and constants: those written
    # (through a view or not) are copied first, the rest read as they are
    written = {
        root[v.name]
        for n in ep.graph.nodes
        if n.op == "call_function" and is_mutating(n)
        for v in written_operands(n)
        if isinstance(v, torch.fx.Node)
    }
    values = {name: value.clone() if name in written else value for name, value in constant_values(ep).items()}
    seen: dict[str, Any] = {}
    stale: set[str] = set()

    def read_outside(node) -> None:
        for operand in node.all_input_nodes:
            if operand.name not in values or operand.op == "placeholder":
                continue
            if not isinstance(values[operand.name], torch.Tensor):
                stale.add(root[operand.name])  # a folded list read as a whole: no constant holds it
            elif operand.name not in seen:
                seen[operand.name] = values[operand.name].clone()
            elif not torch.equal(seen[operand.name], values[operand.name]):
                stale.add(root[operand.name])  # written between two readers: no one constant for it

    for node in ep.graph.nodes:
        if node.op == "output":
            read_outside(node)
        if node.op != "call_function":
            continue
        operands = [n.name for n in node.all_input_nodes]
        if node.target is operator.getitem and operands and operands[0] in values:  # an item of a folded list
            values[node.name] = values[operands[0]][node.args[1]]
            continue
        filled = _shape_only_fill(node)
        if filled is not None and root[node.name] not in excluded and node.meta["val"].numel() <= MAX_FOLDED_ELEMENTS:
            val = node.meta["val"]
            values[node.name] = torch.full(tuple(val.shape), filled, dtype=val.dtype)
            continue
        evaluable = (
            _foldable_op(node)
            and root[node.name] not in excluded
            and all(name in values for name in operands)
            and _size(node.meta["val"])
            <= max(MAX_FOLDED_ELEMENTS, max((_size(values[n]) for n in operands), default=0))
        )
        if not evaluable:
            if is_mutating(node):  # it writes a storage this pass may have evaluated
                stale.update(
                    root[v.name]
                    for v in written_operands(node)
                    if isinstance(v, torch.fx.Node) and root[v.name] not in excluded and v.name in values
                )
            read_outside(node)
            continue
        args, kwargs = map_arg((node.args, node.kwargs), lambda n: values[n.name])
        with torch.no_grad():
            values[node.name] = node.target(*args, **kwargs)
    return values, seen, stale


class FoldConstants:
    name = "fold-constants"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        values, seen = _evaluate(exported_program)
        folded = [n for n in exported_program.graph.nodes if n.op == "call_function" and n.name in values]
        if not folded:
            return exported_program, PassResult(self.name, 0, "no input-independent ops in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        frontier = [
            n
            for n in graph.nodes
            if n.op == "call_function"
            and n.name in values
            and any(u.name not in values or u.op == "output" for u in n.users)
        ]
        for node in frontier:
            value = seen.get(node.name, values[node.name]).detach().clone().contiguous()
            replace_node(ep, node, lift_constant(ep, f"_folded_{node.name}", value, node))
        # the folded in-place writes (dead code elimination keeps ops that mutate), last first
        for node in reversed(
            [n for n in graph.nodes if n.op == "call_function" and n.name in values and is_mutating(n)]
        ):
            if not node.users:
                graph.erase_node(node)
        finish(ep)
        ops = sorted({str(n.target).removeprefix("aten.") for n in folded})
        return ep, PassResult(
            self.name,
            len(folded),
            f"folded {len(folded)} input-independent op(s) into {len(frontier)} constant(s): {', '.join(ops)}",
            {"folded_ops": ops, "constants": len(frontier)},
        )


def lift_constant(ep, target: str, value, like) -> Any:
    """A new CONSTANT_TENSOR input of `ep` holding `value` (a placeholder node, meta copied from `like`)."""
    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

    graph = ep.graph_module.graph
    specs = list(ep.graph_signature.input_specs)
    first_user = next(i for i, s in enumerate(specs + [None]) if s is None or s.kind == InputKind.USER_INPUT)
    anchor = next((n for n in graph.nodes if n.op != "placeholder"), None)
    if first_user < len(specs):
        anchor = next(n for n in graph.nodes if n.op == "placeholder" and n.name == specs[first_user].arg.name)
    with graph.inserting_before(anchor):
        placeholder = graph.placeholder(f"c{target}" if target.startswith("_") else f"c_{target}")
    placeholder.meta.update(like.meta)
    val = like.meta.get("val")
    placeholder.meta["val"] = val.new_empty(value.shape, dtype=value.dtype) if hasattr(val, "new_empty") else value
    ep.constants[target] = value
    specs.insert(first_user, InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(placeholder.name), target))
    ep.graph_signature.input_specs[:] = specs  # the signature keeps its own list: edit in place
    return placeholder
