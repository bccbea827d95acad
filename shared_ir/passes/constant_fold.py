"""Fold subgraphs that depend on no input into constants.

Exported models often compute constants at run time: HF transformers build position ids with
`gather` over a buffer and mask patterns with `arange`/`new_ones`/`ge`, all independent of the
model's inputs. A target with no kernel for those ops should not refuse the model for them.
This pass evaluates every deterministic ATen op whose operands are all constants (buffers that
are never mutated, lifted constants, or ops with no tensor operand like `arange`) and replaces
the frontier of that constant subgraph with lifted constants (CONSTANT_TENSOR inputs).

Parameters are never folded (they stay weights, for quantization), and a fold that would
materialize a large tensor from small ones (an `expand` to a big shape) is not made.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import finish, replace_node

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
            values[spec.arg.name] = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            values[spec.arg.name] = ep.constants[spec.target]
    return values


def _foldable_op(node) -> bool:
    import torch

    target = node.target
    return (
        isinstance(target, torch._ops.OpOverload)
        and target.namespace == "aten"
        and torch.Tag.nondeterministic_seeded not in target.tags
        and (not target._schema.is_mutable or _private_in_place(node))
        and isinstance(node.meta.get("val"), torch.Tensor)
    )


def _private_in_place(node) -> bool:
    """An in-place op (`x.add_(y)`, T5's relative position buckets) on a value nothing else
    reads and that is no view of another: the same as its out-of-place form, so it folds too
    (evaluated on a copy). Folding only its operand left a constant the op then mutated, which
    litert-torch refuses."""
    import torch

    written = _written_operands(node)
    first = node.args[0] if node.args else None
    return (
        node.target._schema.name.endswith("_")
        and len(written) == 1
        and written[0] is first
        and isinstance(first, torch.fx.Node)
        and first.op == "call_function"
        and len(first.users) == 1
        and not _is_view(first)
    )


def _written_operands(node) -> list:
    """The operands an in-place op writes (its schema's arguments marked `Tensor(a!)`)."""
    arguments = node.target._schema.arguments
    return [node.args[i] if i < len(node.args) else node.kwargs.get(arg.name) for i, arg in enumerate(arguments)
            if arg.alias_info is not None and arg.alias_info.is_write]


def _is_view(node) -> bool:
    """The op returns a view of its first operand (slice, select, permute, ...)."""
    import torch

    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not target._schema.returns:
        return False
    alias = target._schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def _mutated_through_views(ep) -> set[str]:
    """Nodes whose storage an in-place op writes that folding cannot fold with it: the written
    value and every view of the same storage. BEiT builds its relative position index with
    `coords[:, :, 0] += k` on views of one tensor: folding evaluates each node on its own copy,
    so the writes would be lost, and the constant left behind is one the graph then mutates
    ("Constant _folded_slice_4 is mutated in the forward method", raised inside litert-torch)."""
    import torch

    root: dict[str, str] = {}  # node -> the node whose storage it views
    for node in ep.graph.nodes:
        first = node.args[0] if node.args else None
        if node.op == "call_function" and _is_view(node) and isinstance(first, torch.fx.Node):
            root[node.name] = root.get(first.name, first.name)
        else:
            root[node.name] = node.name
    written = set()
    for node in ep.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or not target._schema.is_mutable:
            continue
        if not _private_in_place(node):
            written.update(root[value.name] for value in _written_operands(node) if isinstance(value, torch.fx.Node))
    return {name for name, base in root.items() if base in written}


def _evaluate(ep) -> dict[str, Any]:
    """node name -> value, for every node computable from constants alone (none whose storage an
    unfoldable in-place op writes)."""
    import torch
    from torch.fx.node import map_arg

    values = constant_values(ep)
    unfoldable = _mutated_through_views(ep)
    for node in ep.graph.nodes:
        if node.op != "call_function" or not _foldable_op(node) or node.name in unfoldable:
            continue
        operands = [n.name for n in node.all_input_nodes]
        if not all(name in values for name in operands):
            continue
        largest = max((values[n].numel() for n in operands), default=0)
        if node.meta["val"].numel() > max(MAX_FOLDED_ELEMENTS, largest):
            continue
        args, kwargs = map_arg((node.args, node.kwargs), lambda n: values[n.name])
        if node.target._schema.is_mutable:  # a private in-place op: mutate a copy, never the folded value
            args = (args[0].clone(), *args[1:])
        with torch.no_grad():
            values[node.name] = node.target(*args, **kwargs).detach().clone().contiguous()
    return values


class FoldConstants:
    name = "fold-constants"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        values = _evaluate(exported_program)
        folded = [n for n in exported_program.graph.nodes if n.op == "call_function" and n.name in values]
        if not folded:
            return exported_program, PassResult(self.name, 0, "no input-independent ops in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        frontier = [
            n for n in graph.nodes
            if n.op == "call_function" and n.name in values and any(u.name not in values or u.op == "output" for u in n.users)
        ]
        for node in frontier:
            replace_node(ep, node, lift_constant(ep, f"_folded_{node.name}", values[node.name], node))
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
