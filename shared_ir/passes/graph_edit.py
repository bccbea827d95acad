"""Small graph edits the passes share: replace a node everywhere, keep the signature in step.

torch.export's graph signature names every output by its node; a pass that replaces an
output node must rename that output spec too, or the program no longer validates.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.torch_compat import is_op_overload, op_schema

__all__ = [
    "replace_node",
    "rename_output_specs",
    "finish",
    "call_functions",
    "built_in_place_of",
    "call_with_val",
    "rewrite_calls",
    "rewritten_calls",
    "static_shapes",
    "per_dim",
    "call_arguments",
    "is_view",
    "is_mutating",
    "written_argument_indices",
    "written_operands",
    "drop_unused_inputs",
    "SOURCE_META",
]

# what a node built by a pass inherits from the node it replaces (source line, module path)
SOURCE_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node")


def call_functions(exported_program: Any, targets) -> list[Any]:
    """The call_function nodes of `exported_program` whose target is in `targets`."""
    targets = set(targets)
    return [n for n in exported_program.graph.nodes if n.op == "call_function" and n.target in targets]


@contextmanager
def built_in_place_of(node: Any) -> Iterator[list]:
    """Insert nodes before `node`; on exit each new node (collected in the yielded list) carries
    `node`'s source line and module path, and its meta["val"] unless the caller set one: an
    error or report about a rewritten op still points at the user's line.

        with built_in_place_of(node) as new:
            y = graph.call_function(aten.relu.default, (x,))
        replace_node(ep, node, y)
    """
    graph = node.graph
    before = set(graph.nodes)
    new: list = []
    with graph.inserting_before(node):
        yield new
    new.extend(n for n in graph.nodes if n not in before)
    for n in new:
        n.meta.update({k: node.meta[k] for k in SOURCE_META if k in node.meta})
        n.meta.setdefault("val", node.meta.get("val"))


def static_shapes(*nodes: Any) -> bool:
    """Whether every one of `nodes` (fx nodes, or anything else, which counts as static) has a
    shape of plain ints: a rewrite that computes sizes, slices or constants from a shape leaves
    an op of a symbolic shape alone (the check reports the program's dynamic shapes)."""
    for node in nodes:
        val = getattr(node, "meta", {}).get("val")
        if val is not None and not all(isinstance(d, int) for d in getattr(val, "shape", ())):
            return False
    return True


def per_dim(value: Any, dims: int) -> list[int]:
    """An op's int-or-list argument (a convolution's stride, padding, dilation) as one int per
    spatial dim: torch writes 1 or [1] for [1, 1]."""
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return values * dims if len(values) == 1 else values


def call_arguments(node: Any) -> dict[str, Any]:
    """Every argument of a call to an ATen op, by its schema's names: the ones the call gives
    (positional or keyword), the schema's defaults for the rest. A pass reads
    `call_arguments(node)["stride"]` instead of zipping its own copy of the schema over node.args."""
    given: dict[str, Any] = {}
    for index, argument in enumerate(op_schema(node.target).arguments):
        if index < len(node.args) and not argument.kwarg_only:
            given[argument.name] = node.args[index]
        elif argument.name in node.kwargs:
            given[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            given[argument.name] = argument.default_value
    return given


def call_with_val(graph: Any, target: Any, *args: Any) -> Any:
    """graph.call_function(target, args), with meta["val"] computed from the inputs' fake
    tensors (the node's true shape and dtype, which later passes and converters read)."""
    import torch

    node = graph.call_function(target, args)
    fake = torch.fx.node.map_arg(args, lambda a: a.meta["val"])
    node.meta["val"] = target(*fake)
    return node


def replace_node(ep: Any, node: Any, replacement: Any) -> None:
    """Every use of `node` (graph output included) becomes `replacement`; `node` is erased."""
    rename_output_specs(ep, node.name, replacement.name)
    node.replace_all_uses_with(replacement)
    node.graph.erase_node(node)


def rename_output_specs(ep: Any, old: str, new: str) -> None:
    """The graph signature's outputs that name node `old` name `new` (after the output node was
    pointed at it)."""
    from torch.export.graph_signature import TensorArgument

    for spec in ep.graph_signature.output_specs:
        if isinstance(spec.arg, TensorArgument) and spec.arg.name == old:
            spec.arg = TensorArgument(name=new)


def is_view(node: Any) -> bool:
    """The op returns a view of its first operand (slice, select, permute, ...), by its schema."""
    target = node.target
    if not is_op_overload(target) or not op_schema(target).returns:
        return False
    alias = op_schema(target).returns[0].alias_info
    return alias is not None and not alias.is_write


def is_mutating(node: Any) -> bool:
    """The op writes one of its operands (an in-place op, copy_, fill_), by its schema."""
    return is_op_overload(node.target) and op_schema(node.target).is_mutable


def written_argument_indices(target: Any) -> list[int]:
    """The positions of the arguments an op writes (its schema's `Tensor(a!)`)."""
    return [
        i for i, arg in enumerate(op_schema(target).arguments) if arg.alias_info is not None and arg.alias_info.is_write
    ]


def written_operands(node: Any) -> list:
    """The operands an in-place op writes."""
    arguments = op_schema(node.target).arguments
    return [
        node.args[i] if i < len(node.args) else node.kwargs.get(arguments[i].name)
        for i in written_argument_indices(node.target)
    ]


def finish(ep: Any) -> Any:
    """Lint and recompile after edits; returns `ep`."""
    ep.graph_module.graph.eliminate_dead_code()
    ep.graph_module.graph.lint()
    ep.graph_module.recompile()
    return ep


def rewrite_calls(exported_program: Any, found: list, rewrite, *, with_program: bool = False) -> tuple[Any, int]:
    """The loop every rewriting pass shares: on a copy of the program, each node of `found`
    (call_function nodes of `exported_program`) is replaced by what `rewrite(graph, node)`
    builds in its place (`built_in_place_of`): one node, or a tuple whose items replace the
    node's `getitem` users (LSTM: output, h, c); None leaves the node as it is.
    `with_program=True` calls `rewrite(program, graph, node)` with the copy being edited, for a
    rewrite that adds constants to it (`constant_fold.lift_constant`).
    Returns (program, how many were rewritten); the input program itself when none was."""
    if not found:
        return exported_program, 0
    ep = copy_program(exported_program)
    graph = ep.graph_module.graph
    names = {n.name for n in found}
    count = 0
    for node in [n for n in graph.nodes if n.name in names]:
        with built_in_place_of(node):
            out = rewrite(ep, graph, node) if with_program else rewrite(graph, node)
        if out is None:
            continue
        count += 1
        if not isinstance(out, (tuple, list)):
            replace_node(ep, node, out)
            continue
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                replace_node(ep, user, out[user.args[1]])
        if not node.users:
            graph.erase_node(node)
    if not count:
        return exported_program, 0
    return finish(ep), count


def rewritten_calls(
    pass_name: str,
    exported_program: Any,
    found: list,
    rewrite,
    *,
    unchanged: str,
    changed: str,
    with_program: bool = False,
) -> tuple[Any, PassResult]:
    """What a pass that rewrites each node of `found` returns: `rewrite_calls`'s program and its
    PassResult, saying `unchanged` when nothing was rewritten, else `changed` with {count} filled."""
    ep, count = rewrite_calls(exported_program, found, rewrite, with_program=with_program)
    if not count:
        return exported_program, PassResult(pass_name, 0, unchanged)
    return ep, PassResult(pass_name, count, changed.format(count=count))


def drop_unused_inputs(ep: Any) -> int:
    """Erase the parameter, buffer and constant inputs no node reads any more (a folded
    BatchNorm's statistics), with their signature entries and values; user inputs always stay.
    Returns how many went."""
    from torch.export.graph_signature import InputKind

    kept_kinds = (InputKind.USER_INPUT, InputKind.TOKEN)
    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    graph = ep.graph_module.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    dropped = [
        s
        for s in ep.graph_signature.input_specs
        if s.kind not in kept_kinds
        and s.target not in mutated
        and getattr(s.arg, "name", None) in placeholders
        and not placeholders[s.arg.name].users
    ]
    if not dropped:
        return 0
    for spec in dropped:
        graph.erase_node(placeholders[spec.arg.name])
    ep.graph_signature.input_specs[:] = [s for s in ep.graph_signature.input_specs if s not in dropped]
    still_read = {s.target for s in ep.graph_signature.input_specs}
    for spec in dropped:
        if spec.target not in still_read:
            ep.state_dict.pop(spec.target, None)
            ep.constants.pop(spec.target, None)
    return len(dropped)
