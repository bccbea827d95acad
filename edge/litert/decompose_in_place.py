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

from tpuedge.edge.litert.decompose_plan import NodePlan, Unsupported, plan_decompositions
from tpuedge.shared_ir.torch_compat import tensor_metadata, tree_leaves
from tpuedge.shared_ir.upstream_gate import Unavailable, fell_back

__all__ = ["decompose_in_place", "decompositions_in_place", "run_decompositions"]

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


def _set_value(node, value) -> None:
    import torch

    node.meta["val"] = value
    if isinstance(value, torch.Tensor):
        node.meta["tensor_meta"] = tensor_metadata(value)


def _apply(exported_program, plans: list[NodePlan]) -> None:
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


def _splice(graph, plan: NodePlan, replaced: dict) -> None:
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
        plans = plan_decompositions(exported_program, table)
    except Unsupported:
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
