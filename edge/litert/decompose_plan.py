"""Phase one of an in-place decomposition (edge/litert/decompose_in_place.py): every node's fate
(kept, traced alone under the table, or made functional) and its new fake value, worked out
before anything changes, so that a case only a whole re-trace handles (`Unsupported`) leaves the
program as it was.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from tpuedge.shared_ir.torch_compat import (
    is_higher_order_op,
    is_op_overload,
    is_op_packet,
    op_name_parts,
    op_schema,
    retrace_internals,
    tree_map,
)
from tpuedge.shared_ir.upstream_gate import Unavailable

__all__ = ["NodePlan", "Unsupported", "plan_decompositions"]

_BUILTIN_OPERATORS = {getattr(operator, name) for name in dir(operator) if not name.startswith("_")}

_FORCE_DECOMP_ATTR = "_litert_torch_force_decomp"  # litert-torch's mark: trace the decomposition itself


class Unsupported(Exception):
    """What only a whole re-trace handles."""


def _reshape_contiguous(self, size):
    # litert-torch's own replacement for every aten.view before it re-traces
    import torch

    return torch.reshape(self.contiguous(), size)


@dataclass
class NodePlan:
    """What phase two does to one node, all of it worked out before anything changes."""

    node: Any
    action: str  # "keep" | "trace" | "functional"
    value: Any = None  # the node's new fake value (keep, functional)
    trace: Any = None  # torch.fx.Graph of the op's decomposition: placeholders (its tensor inputs), ops, output
    inputs: list = field(default_factory=list)
    sub_values: dict = field(default_factory=dict)  # trace node -> fake value
    functional_op: Any = None
    written: list = field(default_factory=list)  # the tensor an in-place op wrote, each version of it


def _returns_alias(op) -> bool:
    return any(r.alias_info is not None for r in op_schema(op).returns)


def _functional_variant(op):
    """aten.relu_.default -> aten.relu.default, where it exists and only `self` is written."""
    import torch

    schema = op_schema(op)
    arguments = schema.arguments
    if not arguments or arguments[0].alias_info is None or not arguments[0].alias_info.is_write:
        return None
    if any(a.alias_info is not None and a.alias_info.is_write for a in arguments[1:]):
        return None
    namespace, name = schema.name.split("::")
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(getattr(torch.ops, namespace), name[:-1], None)
    functional = getattr(packet, op_name_parts(op)[2], None) if packet is not None else None
    if functional is None or op_schema(functional).is_mutable or _returns_alias(functional):
        return None
    if [a.name for a in op_schema(functional).arguments] != [a.name for a in arguments]:
        return None
    return functional


def _target_key(target):
    """A function a pass made per node (a closure over the op it wraps) keys as its code and what
    it closes over, so two nodes the pass rewrote alike share one trace."""
    import torch

    plain = (int, float, bool, str, type(None), torch.dtype)
    code = getattr(target, "__code__", None)
    if code is None or getattr(target, "__defaults__", None) or getattr(target, "__kwdefaults__", None):
        return target
    contents = tuple(cell.cell_contents for cell in getattr(target, "__closure__", None) or ())
    return (
        (code, contents)
        if all(isinstance(c, plain) or is_op_overload(c) or is_op_packet(c) for c in contents)
        else target
    )


def _value_key(value):
    import torch

    if isinstance(value, torch.Tensor):
        return (
            tuple(value.shape),
            value.stride(),
            value.dtype,
            value.storage_offset(),
            getattr(value, "constant", None) is not None,
        )
    return repr(value)


def _trace_key(target, node, inputs, values):
    import torch

    index = {n: i for i, n in enumerate(inputs)}
    arguments = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: f"#{index[n]}")
    return (_target_key(target), repr(arguments), tuple(_value_key(v) for v in values))


def _traced(target, node, inputs, values, table, rt):
    """The decomposition of `target` applied to `node`'s arguments, as a graph over its inputs,
    traced as torch.export's re-trace traces (functionalization and the Python dispatcher on, the
    table in make_fx; `rt`: torch_compat.retrace_internals())."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    args, kwargs = node.args, node.kwargs

    def call(*tensors):
        functional = [rt.to_fun(t) for t in tensors]
        by_node = dict(zip(inputs, functional))
        a, k = torch.fx.node.map_arg((args, kwargs), lambda n: by_node[n])
        out = target(*a, **k)
        for t in functional:
            rt.sync(t)
            if rt.has_data_mutation(t):
                raise Unsupported(f"its decomposition of {node.target} writes to its input")
        return tree_map(rt.from_fun, out)

    with rt.enable_python_dispatcher(), rt.functional_mode():
        module = make_fx(call, decomposition_table=table, record_module_stack=True, pre_dispatch=False)(*values)
    for sub in module.graph.nodes:
        if sub.op not in ("placeholder", "call_function", "output"):
            raise Unsupported(f"its decomposition of {node.target} makes a {sub.op}")
        if sub.op == "call_function":
            op = sub.target
            if is_op_overload(op) and op_schema(op).is_mutable:
                raise Unsupported(f"its decomposition of {node.target} mutates ({op})")
            if not is_op_overload(op) and op is not operator.getitem:
                raise Unsupported(f"its decomposition of {node.target} calls {op}")
    return module.graph


def plan_decompositions(exported_program, table) -> list[NodePlan]:
    """Phase one: every node's fate and new fake value, tracing what changes. Changes nothing."""
    import torch
    from torch.fx import traceback as fx_traceback

    try:
        rt = retrace_internals()
    except Unavailable as exc:
        raise Unsupported(str(exc)) from exc
    graph = exported_program.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    fake_mode = rt.detect_fake_mode([n.meta.get("val") for n in placeholders])
    if fake_mode is None:
        raise Unsupported("its inputs carry no fake values")
    if any(isinstance(d, torch.SymInt) for n in placeholders for d in getattr(n.meta.get("val"), "shape", ())):
        raise Unsupported("it has symbolic shapes")
    composite, python_table = rt.split_decomp_table(dict(table))
    preserved = {op for op, decomposition in composite.items() if decomposition is rt.preserve_cia}

    def changes(node) -> bool:
        op = node.target
        if is_higher_order_op(op):
            raise Unsupported(f"it has a higher-order op ({op})")
        if not is_op_overload(op):
            return op not in _BUILTIN_OPERATORS
        return (
            op in python_table
            or (op in composite and op not in preserved)
            or (rt.is_cia_op(op) and op not in composite)
        )

    if torch.ops.aten.view.default in python_table:
        raise Unsupported("its table decomposes views")
    values: dict = {n: n.meta["val"] for n in placeholders}
    latest: dict = {}  # a tensor an in-place op wrote -> the node holding its next value
    traces: dict = {}
    plans: list[NodePlan] = []

    def current(n):
        while n in latest:
            n = latest[n]
        return n

    with (
        fake_mode,
        rt.ignore_backend_decomps(),
        rt.override_composite_implicit_decomp(composite),
        fx_traceback.preserve_node_meta(),
    ):
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op != "call_function":
                raise Unsupported(f"it has a {node.op} node")
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: values[current(n)])
            op = node.target
            if is_op_overload(op) and op_schema(op).is_mutable:
                plans.append(_functional_plan(node, op, args, kwargs, current))
                values[node] = plans[-1].value
                latest[current(node.args[0])] = node
                continue
            target = op
            if op is torch.ops.aten.view.default:
                if args[0].is_contiguous():
                    target = None
                else:
                    target = _reshape_contiguous
            elif not changes(node):
                target = None
            elif hasattr(python_table.get(op), _FORCE_DECOMP_ATTR):
                target = python_table[op]
            if target is None:
                value = op(*args, **kwargs)
                values[node] = value
                plans.append(NodePlan(node, "keep", value=value))
                continue
            inputs = [current(n) for n in node.all_input_nodes]
            input_values = [values[n] for n in inputs]
            key = _trace_key(target, node, node.all_input_nodes, input_values)
            trace = traces.get(key)
            if trace is None:
                with fx_traceback.set_current_meta(node):
                    trace = traces[key] = _traced(target, node, node.all_input_nodes, input_values, python_table, rt)
                sub_values = _replay(trace, input_values, recorded=True)
            else:
                sub_values = _replay(trace, input_values)
            plans.append(NodePlan(node, "trace", trace=trace, inputs=inputs, sub_values=sub_values))
            output = trace.output_node().args[0]
            if not isinstance(output, torch.fx.Node) and any(u.target is not operator.getitem for u in node.users):
                raise Unsupported(f"{node.name}'s outputs are read other than one by one")
            values[node] = torch.fx.node.map_arg(output, lambda n: sub_values[n])
    return plans


def _functional_plan(node, op, args, kwargs, current) -> NodePlan:
    """An in-place op on an intermediate tensor nothing aliases, as its functional variant."""
    functional = _functional_variant(op)
    if functional is None:
        raise Unsupported(f"it has an in-place op with no functional variant to take ({op})")
    written = [node.args[0]]
    while is_op_overload(written[0].target) and op_schema(written[0].target).is_mutable:
        written.insert(0, written[0].args[0])  # relu_(add_(x)): back to x, the tensor first written
    base = written[0]
    if base.op != "call_function" or not is_op_overload(base.target) or _returns_alias(base.target):
        raise Unsupported(f"{op} writes to an input, a view or a tensor it cannot follow ({base.name})")
    if current(base) is not current(node.args[0]):
        raise Unsupported(f"{op} writes to {base.name} through an older version of it")
    for version in written:  # a view of the tensor would see the write (in-place ops return an alias too)
        if any(
            is_op_overload(u.target) and _returns_alias(u.target) and not op_schema(u.target).is_mutable
            for u in version.users
        ):
            raise Unsupported(f"{op} writes to {base.name}, which a view reads")
    return NodePlan(node, "functional", value=functional(*args, **kwargs), functional_op=functional, written=written)


def _replay(trace, input_values, *, recorded: bool = False) -> dict:
    """Fake values for a trace's nodes on these inputs: those the trace recorded for the node it
    was made for (`recorded`), else fresh ones (a fake tensor is never shared between two nodes of
    a program: passes read shared storage as aliasing)."""
    import torch

    values: dict = {}
    placeholders = iter(input_values)
    for sub in trace.nodes:
        if sub.op == "placeholder":
            values[sub] = next(placeholders)
        elif sub.op == "call_function":
            if recorded and "val" in sub.meta:
                values[sub] = sub.meta["val"]
                continue
            a, k = torch.fx.node.map_arg((sub.args, sub.kwargs), lambda n: values[n])
            values[sub] = sub.target(*a, **k)
    return values
