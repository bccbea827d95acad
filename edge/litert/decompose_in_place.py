"""litert-torch's decompositions applied to the nodes they change, not by re-tracing the program.

A LiteRT lowering runs `ExportedProgram.run_decompositions` twice over the whole program:
litert-torch's pre-convert table (`litert_lowering._decompose`) and, in its MLIR lowering, the
pre-lower table (core ATen's). A re-trace runs every node through torch's functionalization,
fake-tensor and proxy modes twice (once for metadata, once to record), recompiles the graph about
a dozen times and unlifts the program into a module: DeiT-tiny's second re-trace took 2.3 s for
791 nodes, 537 of which came out as they went in. Here only what changes is traced:
  - a node whose op the table names (or a composite op torch would not keep), a Python function a
    pass left in the graph (litert-torch's NHWC wrappers), and an `aten.view` of a non-contiguous
    tensor (litert-torch re-traces each view as reshape(contiguous) for that case) are each traced
    alone with `make_fx` under the table, functionalized; nodes of one op on alike inputs share a
    trace (DeiT-tiny: 100 such nodes, 23 traces);
  - every other node is kept, its fake value recomputed, so that strides after a changed node
    (which decide whether a view needs a copy) are what a re-trace computes; every node's
    `tensor_meta`, the inputs' included, is written anew as a re-trace writes it (litert-torch
    types the lowered function by it, and a pass can leave it stale: NHWC inputs did);
  - an in-place op (ReLU_) on a tensor nothing aliases becomes its functional variant, as
    functionalization writes it.
Anything else — a mutation of an input or of a view, higher-order ops, symbolic shapes, a
decomposition that makes a constant or mutates its input — is left to the whole re-trace,
unchanged (`run_decompositions` decides before it changes anything).

What can differ from a re-trace: functionalization writes the view it regenerates after an
in-place op on a view (litert-torch's NHWC convolution adds its bias in place to a transposed
result) where the whole trace next reads it, with that reader's module scope; traced alone, it
comes right after the op, with the op's scope. The ops, their order and the weights are the
same; a tensor's name can differ (it did on 8 of the 23 zoo models).
"""

from __future__ import annotations

import contextlib
import copy
import operator
from dataclasses import dataclass, field
from typing import Any

from tpuedge.shared_ir.torch_compat import (
    is_higher_order_op,
    is_op_overload,
    is_op_packet,
    retrace_internals,
    tensor_metadata,
    tree_leaves,
    tree_map,
)
from tpuedge.shared_ir.upstream_gate import Unavailable, fell_back

__all__ = ["decompose_in_place", "decompositions_in_place", "run_decompositions"]

_BUILTIN_OPERATORS = {getattr(operator, name) for name in dir(operator) if not name.startswith("_")}
# what a traced node takes from the node it replaces (torch's proxy copies these from the node
# being re-traced), rather than from the node the shared trace was first made for
_ORIGIN_FIELDS = (
    "nn_module_stack",
    "torch_fn",
    "source_fn_stack",
    "recompute",
    "ac_graph_id",
    "has_backward_hook",
    "quantization_tag",
    "_numeric_debug_handle",
    "custom",
    "partitioner_tag",
    "stack_trace",
)
_FORCE_DECOMP_ATTR = "_litert_torch_force_decomp"  # litert-torch's mark: trace the decomposition itself


class _Unsupported(Exception):
    """What only a whole re-trace handles."""


def _reshape_contiguous(self, size):
    # litert-torch's own replacement for every aten.view before it re-traces
    import torch

    return torch.reshape(self.contiguous(), size)


@dataclass
class _Plan:
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
    return any(r.alias_info is not None for r in op._schema.returns)


def _functional_variant(op):
    """aten.relu_.default -> aten.relu.default, where it exists and only `self` is written."""
    import torch

    schema = op._schema
    arguments = schema.arguments
    if not arguments or arguments[0].alias_info is None or not arguments[0].alias_info.is_write:
        return None
    if any(a.alias_info is not None and a.alias_info.is_write for a in arguments[1:]):
        return None
    namespace, name = schema.name.split("::")
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(getattr(torch.ops, namespace), name[:-1], None)
    functional = getattr(packet, op._overloadname, None) if packet is not None else None
    if functional is None or functional._schema.is_mutable or _returns_alias(functional):
        return None
    if [a.name for a in functional._schema.arguments] != [a.name for a in arguments]:
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
                raise _Unsupported(f"its decomposition of {node.target} writes to its input")
        return tree_map(rt.from_fun, out)

    with rt.enable_python_dispatcher(), rt.functional_mode():
        module = make_fx(call, decomposition_table=table, record_module_stack=True, pre_dispatch=False)(*values)
    for sub in module.graph.nodes:
        if sub.op not in ("placeholder", "call_function", "output"):
            raise _Unsupported(f"its decomposition of {node.target} makes a {sub.op}")
        if sub.op == "call_function":
            op = sub.target
            if is_op_overload(op) and op._schema.is_mutable:
                raise _Unsupported(f"its decomposition of {node.target} mutates ({op})")
            if not is_op_overload(op) and op is not operator.getitem:
                raise _Unsupported(f"its decomposition of {node.target} calls {op}")
    return module.graph


def _plan(exported_program, table) -> list[_Plan]:
    """Phase one: every node's fate and new fake value, tracing what changes. Changes nothing."""
    import torch
    from torch.fx import traceback as fx_traceback

    try:
        rt = retrace_internals()
    except Unavailable as exc:
        raise _Unsupported(str(exc)) from exc
    graph = exported_program.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    fake_mode = rt.detect_fake_mode([n.meta.get("val") for n in placeholders])
    if fake_mode is None:
        raise _Unsupported("its inputs carry no fake values")
    if any(isinstance(d, torch.SymInt) for n in placeholders for d in getattr(n.meta.get("val"), "shape", ())):
        raise _Unsupported("it has symbolic shapes")
    composite, python_table = rt.split_decomp_table(dict(table))
    preserved = {op for op, decomposition in composite.items() if decomposition is rt.preserve_cia}

    def changes(node) -> bool:
        op = node.target
        if is_higher_order_op(op):
            raise _Unsupported(f"it has a higher-order op ({op})")
        if not is_op_overload(op):
            return op not in _BUILTIN_OPERATORS
        return (
            op in python_table
            or (op in composite and op not in preserved)
            or (rt.is_cia_op(op) and op not in composite)
        )

    if torch.ops.aten.view.default in python_table:
        raise _Unsupported("its table decomposes views")
    values: dict = {n: n.meta["val"] for n in placeholders}
    latest: dict = {}  # a tensor an in-place op wrote -> the node holding its next value
    traces: dict = {}
    plans: list[_Plan] = []

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
                raise _Unsupported(f"it has a {node.op} node")
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: values[current(n)])
            op = node.target
            if is_op_overload(op) and op._schema.is_mutable:
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
                plans.append(_Plan(node, "keep", value=value))
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
            plans.append(_Plan(node, "trace", trace=trace, inputs=inputs, sub_values=sub_values))
            output = trace.output_node().args[0]
            if not isinstance(output, torch.fx.Node) and any(u.target is not operator.getitem for u in node.users):
                raise _Unsupported(f"{node.name}'s outputs are read other than one by one")
            values[node] = torch.fx.node.map_arg(output, lambda n: sub_values[n])
    return plans


def _functional_plan(node, op, args, kwargs, current) -> _Plan:
    """An in-place op on an intermediate tensor nothing aliases, as its functional variant."""
    functional = _functional_variant(op)
    if functional is None:
        raise _Unsupported(f"it has an in-place op with no functional variant to take ({op})")
    written = [node.args[0]]
    while is_op_overload(written[0].target) and written[0].target._schema.is_mutable:
        written.insert(0, written[0].args[0])  # relu_(add_(x)): back to x, the tensor first written
    base = written[0]
    if base.op != "call_function" or not is_op_overload(base.target) or _returns_alias(base.target):
        raise _Unsupported(f"{op} writes to an input, a view or a tensor it cannot follow ({base.name})")
    if current(base) is not current(node.args[0]):
        raise _Unsupported(f"{op} writes to {base.name} through an older version of it")
    for version in written:  # a view of the tensor would see the write (in-place ops return an alias too)
        if any(
            is_op_overload(u.target) and _returns_alias(u.target) and not u.target._schema.is_mutable
            for u in version.users
        ):
            raise _Unsupported(f"{op} writes to {base.name}, which a view reads")
    return _Plan(node, "functional", value=functional(*args, **kwargs), functional_op=functional, written=written)


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


def _set_value(node, value) -> None:
    import torch

    node.meta["val"] = value
    if isinstance(value, torch.Tensor):
        node.meta["tensor_meta"] = tensor_metadata(value)


def _apply(exported_program, plans: list[_Plan]) -> None:
    """Phase two: the changes, in graph order."""
    from torch.fx.traceback import NodeSource, NodeSourceAction

    graph = exported_program.graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    replaced: dict = {}  # a node spliced out (or a getitem of it) -> what took its place
    for node in graph.nodes:  # as a re-trace writes them: a pass may have left one stale
        if node.op == "placeholder":
            _set_value(node, node.meta["val"])
    for plan in plans:
        node = plan.node
        if plan.action != "trace":
            # as a re-trace records every node it copies: litert-torch writes a node's source
            # line into its MLIR location only where it has this, and a converter refusal
            # names the model's line from that location (edge/float_model.converter_refusal)
            node.meta["from_node"] = [NodeSource(node, "", NodeSourceAction.CREATE)]
        if plan.action == "keep":
            _set_value(node, plan.value)
        elif plan.action == "functional":
            for version in plan.written:  # what reads the tensor after the write reads the new value
                for user in list(version.users):
                    if user is not node and order.get(user, -1) > order[node]:
                        user.replace_input_with(version, node)
            node.target = plan.functional_op
            _set_value(node, plan.value)
        else:
            _splice(graph, plan, replaced)
    graph.eliminate_dead_code()
    _rename_outputs(exported_program)
    exported_program.graph_module.recompile()


def _rename_outputs(exported_program) -> None:
    """The signature's outputs named as the nodes the output now reads (a re-trace writes a new
    signature; torch's verifier checks the names)."""
    import torch
    from torch.export.graph_signature import TensorArgument

    output = exported_program.graph.output_node()
    flat = tree_leaves(output.args[0])
    specs = exported_program.graph_signature.output_specs
    if len(flat) != len(specs):
        raise RuntimeError(f"{len(flat)} outputs in the graph, {len(specs)} in its signature")  # a bug of ours
    for spec, node in zip(specs, flat):
        if isinstance(spec.arg, TensorArgument) and isinstance(node, torch.fx.Node):
            spec.arg = TensorArgument(name=node.name)


def _splice(graph, plan: _Plan, replaced: dict) -> None:
    """The node's decomposition in its place, reading what replaced its inputs."""
    import torch
    from torch.fx.traceback import NodeSource, NodeSourceAction

    node = plan.node
    mapping: dict = {}
    placeholders = iter(replaced.get(n, n) for n in plan.inputs)
    result = None
    with graph.inserting_before(node):
        for sub in plan.trace.nodes:
            if sub.op == "placeholder":
                mapping[sub] = next(placeholders)
            elif sub.op == "call_function":
                new = graph.node_copy(sub, lambda n: mapping[n])
                for name in _ORIGIN_FIELDS:
                    if name in node.meta:
                        new.meta[name] = copy.copy(node.meta[name])
                    else:
                        new.meta.pop(name, None)
                new.meta["from_node"] = [NodeSource(node, "", NodeSourceAction.CREATE)]
                _set_value(new, plan.sub_values[sub])
                mapping[sub] = new
            elif sub.op == "output":
                result = torch.fx.node.map_arg(sub.args[0], lambda n: mapping[n])
    if isinstance(result, torch.fx.Node):
        node.replace_all_uses_with(result)
        replaced[node] = result
    else:  # a tuple: its readers are getitems
        for user in list(node.users):
            user.replace_all_uses_with(result[user.args[1]])
            replaced[user] = result[user.args[1]]
            graph.erase_node(user)
    graph.erase_node(node)


def decompose_in_place(exported_program, table):
    """`exported_program` with `table`'s decompositions applied (changed in place), or None, unchanged,
    where only a whole re-trace can apply them. Planning changes nothing, so a private torch call
    that raises there (another torch) costs the re-trace, not the build."""
    try:
        plans = _plan(exported_program, table)
    except _Unsupported:
        return None
    except Exception as exc:  # noqa: BLE001 - torch internals: any of their errors means "re-trace"
        fell_back("in-place decomposition", repr(exc))
        return None
    _apply(exported_program, plans)
    return exported_program


def run_decompositions(exported_program, table=None, can_skip=True, *, whole_retrace):
    """litert-torch's `safe_run_decompositions`, decomposing in place where it can and by
    `whole_retrace` (litert-torch's own) where it cannot."""
    from tpuedge.edge.litert.litert_torch_compat import decomposition_helpers

    if table is None or not table:
        return whole_retrace(exported_program, table, can_skip)
    try:
        require_decomp, erase_asserts = decomposition_helpers()
    except Unavailable:
        return whole_retrace(exported_program, table, can_skip)
    if can_skip and not require_decomp(exported_program, table):
        return exported_program
    erase_asserts(exported_program)
    done = decompose_in_place(exported_program, table)
    if done is None:
        return whole_retrace(exported_program, table, can_skip)
    nodes = len(done.graph.nodes)
    erase_asserts(done)
    if len(done.graph.nodes) != nodes:  # decompose_in_place recompiled it already
        done.graph_module.recompile()
    return done


def decompositions_in_place() -> contextlib.AbstractContextManager[None]:
    """litert-torch's decompositions go through `run_decompositions` while the block runs, in its
    threads (shared by concurrent builds; edge/litert/litert_torch_compat.py installs and undoes it; a
    user's own litert-torch call, after it or in another thread, is left as it was)."""
    from tpuedge.edge.litert.litert_session import litert_session
    from tpuedge.edge.litert.litert_torch_compat import decompositions_replaced

    with litert_session():  # it imports litert-torch: before the patch's lock is taken, not under it
        pass
    return decompositions_replaced(run_decompositions)
