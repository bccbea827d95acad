"""A .tflite flatbuffer's main graph (read by tpuedge.edge.flatbuffer.tflite_file) and its tensors mapped to IR nodes.

The converter keeps no fx node names in the flatbuffer, but litert-torch names every tensor
after the `nn_module_stack` scopes of the IR nodes it was lowered from (fused ops may join
the scopes with ";"). `match_tensors` walks the ops in execution order; an op's output may
hold any IR node downstream of the op's already-placed inputs that lies in one of the tensor's
scopes and has the tensor's shape (IR layout, channels-last, without the size-1 axes a
FULLY_CONNECTED drops, with the one a Conv1d run as CONV_2D gains, or for a TRANSPOSE's output
any axis order), or a BatchNorm /
activation folded right after such a node. Ops that only move data (QUANTIZE, TRANSPOSE,
RESHAPE of a layout) hold their input's node. `tflite_matches` then settles, per tensor, which
candidate it holds, by value on one sample.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tpuedge.edge.flatbuffer.tensor_names import ScopeNames
from tpuedge.shared_ir.sources import module_scope
from tpuedge.shared_ir.ir_values import IRLayer
from tpuedge.shared_ir.layouts import inverse_permutation, layout_permutation

__all__ = [
    "TfliteTensor",
    "TfliteOp",
    "TfliteGraph",
    "TensorCandidates",
    "read_graph",
    "match_tensors",
    "dequantize",
    "counterpart_nodes",
    "to_ir_layout",
]

# Ops that move or re-encode a value without computing a new one.
_DATA_MOVEMENT_OPS = {"QUANTIZE", "DEQUANTIZE", "TRANSPOSE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST"}
_CHANNELS_LAST_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "TRANSPOSE_CONV", "CONV_3D"}


@dataclass(frozen=True)
class TfliteTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy name
    scale: np.ndarray  # empty for float tensors
    zero_point: np.ndarray
    quantized_dimension: int


@dataclass(frozen=True)
class TfliteOp:
    index: int
    name: str  # builtin op name, e.g. "CONV_2D"
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class TfliteGraph:
    tensors: list[TfliteTensor]
    ops: list[TfliteOp]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def read_graph(model_bytes: bytes) -> TfliteGraph:
    """The first subgraph's tensors and ops (no weight data is read)."""
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(model_bytes)
    codes = tflite_file.operator_names(model)
    graph = model.subgraphs[0]
    tensors = []
    for i, t in enumerate(graph.tensors or []):
        scale, zero, axis = tflite_file.tensor_quantization(t)
        tensors.append(
            TfliteTensor(
                index=i,
                name=tflite_file.text(t.name),
                shape=tuple(int(d) for d in (t.shape if t.shape is not None else ())),
                dtype=tflite_file.dtype_name(t.type),
                scale=scale,
                zero_point=zero,
                quantized_dimension=axis,
            )
        )
    ops = []
    for i, op in enumerate(graph.operators or []):
        ins = tuple(int(x) for x in (op.inputs if op.inputs is not None else ()))
        outs = tuple(int(x) for x in (op.outputs if op.outputs is not None else ()))
        ops.append(TfliteOp(i, codes[op.opcodeIndex], ins, outs))
    return TfliteGraph(
        tensors=tensors,
        ops=ops,
        inputs=tuple(int(x) for x in graph.inputs),
        outputs=tuple(int(x) for x in graph.outputs),
    )


def dequantize(tensor: TfliteTensor, raw: np.ndarray) -> np.ndarray:
    """Real values of a runtime tensor (float tensors pass through)."""
    from tpuedge.quantize import affine

    raw = np.asarray(raw)
    if tensor.scale.size == 0 or np.issubdtype(raw.dtype, np.floating):
        return raw.astype(np.float64)
    return affine.dequantize(raw, tensor.scale, tensor.zero_point, tensor.quantized_dimension).astype(np.float64)


# IR ops a converter folds into the op before them (BatchNorm into conv weights, activations
# as the fused activation): a tensor named after a conv may hold the value after them.
_FUSABLE_OPS = {
    "aten.batch_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten.relu.default",
    "aten.relu_.default",
    "aten.relu6.default",
    "aten.hardtanh.default",
    "aten.hardtanh_.default",
    "aten.clamp.default",
    "aten.tanh.default",
    "_operator.getitem",
}


def _unit_axes_differ(ir_shape, runtime_shape) -> bool:
    """The runtime shape is the IR's but for some size-1 axes: a FULLY_CONNECTED on a (1, T, C)
    input yields (T, C); a Conv1d runs as a 2-D convolution on (N, C, 1, W). The same values, in
    the same order."""
    return len(runtime_shape) != len(ir_shape) and [d for d in ir_shape if d != 1] == [
        d for d in runtime_shape if d != 1
    ]


def _unit_axis_channels_last(ir_shape, runtime_shape) -> tuple[int, ...] | None:
    """The layout of a 1-D convolution's tensors: the converter runs Conv1d as CONV_2D on the IR's
    (N, C, W) with a size-1 axis put in, channels last ((N, 1, W, C)). The permutation of that
    expanded shape, or None. A wav2vec2 or keyword-spotting front end was blind to per-layer
    verify without it."""
    rank = len(ir_shape)
    if rank < 3 or len(runtime_shape) != rank + 1:
        return None
    for axis in range(2, rank + 1):
        expanded = (*ir_shape[:axis], 1, *ir_shape[axis:])
        perm = layout_permutation(expanded, runtime_shape)
        if perm:
            return perm
    return None


def to_ir_layout(value: np.ndarray, perm: tuple[int, ...], ir_shape) -> np.ndarray:
    """A runtime tensor's value in its IR node's layout: the channels-last permutation undone,
    and the size-1 axes the converter dropped or put in taken back."""
    got = np.transpose(value, inverse_permutation(perm)) if perm else value
    return got.reshape(ir_shape) if _unit_axes_differ(ir_shape, got.shape) else got


def _other_layouts(ir_shape, tensor: TfliteTensor) -> list[tuple[int, ...]]:
    """The other axis orders that give the IR shape the tensor's shape, for up to 4 axes (a
    key transposed for its matmul, heads-last attention): which one holds the node's values is
    settled by value, like the node itself."""
    rank = len(ir_shape)
    if rank != len(tensor.shape) or rank > 4:
        return []
    return [
        perm
        for perm in itertools.permutations(range(rank))
        if perm != tuple(range(rank)) and tuple(ir_shape[p] for p in perm) == tuple(tensor.shape)
    ]


def _choose_perm(ir_shape, tensor: TfliteTensor, op_name: str, seed_perm: tuple[int, ...] | None):
    perm = layout_permutation(ir_shape, tensor.shape)
    if perm is None:
        return () if _unit_axes_differ(ir_shape, tensor.shape) else _unit_axis_channels_last(ir_shape, tensor.shape)
    channels_last = (0, *range(2, len(ir_shape)), 1) if len(ir_shape) >= 3 else None
    ambiguous = (
        perm == ()
        and channels_last is not None
        and layout_permutation([ir_shape[p] for p in channels_last], tensor.shape) == ()
    )
    if ambiguous and (op_name in _CHANNELS_LAST_OPS or seed_perm == channels_last):
        return channels_last
    return perm


@dataclass(frozen=True)
class TensorCandidates:
    """IR nodes runtime tensor `tensor` may hold, best guess last; resolved by value later."""

    tensor: int
    op: str  # the op that produces it ("" for a graph input)
    candidates: tuple[tuple[str, tuple[int, ...]], ...]  # (node, perm IR -> runtime)


def match_tensors(graph: TfliteGraph, program, layers: dict[str, IRLayer]) -> list[TensorCandidates]:
    """For each runtime tensor that can be placed, the IR nodes it may hold (module docstring)."""
    from torch.export.graph_signature import OutputKind

    from tpuedge.shared_ir.op_registry import op_key

    ep = program.exported_program
    scope_names = ScopeNames(ep)
    nodes = {n.name: n for n in ep.graph.nodes}
    scope_of = {name: s for name, n in nodes.items() if (s := module_scope(n))}
    order = {n.name: i for i, n in enumerate(ep.graph.nodes)}
    input_layers = [l.name for l in layers.values() if l.is_input]

    found: dict[int, TensorCandidates] = {}
    for tensor_index, node_name in zip(graph.inputs, input_layers):
        perm = _choose_perm(layers[node_name].shape, graph.tensors[tensor_index], "", None)
        if perm is not None:
            found[tensor_index] = TensorCandidates(tensor_index, "", ((node_name, perm),))

    # graph outputs carry signature names, not scopes: they are the IR's user outputs in order,
    # and so are the tensors that only get dequantized/reshaped into them
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    user_outputs = [
        arg.name
        for arg, spec in zip(out_node.args[0], ep.graph_signature.output_specs)
        if spec.kind == OutputKind.USER_OUTPUT and hasattr(arg, "name")
    ]
    output_of = dict(zip(graph.outputs, user_outputs))
    producer = {t: op for op in graph.ops for t in op.outputs}
    for tensor_index, node_name in list(output_of.items()):
        op = producer.get(tensor_index)
        while op is not None and op.name in _DATA_MOVEMENT_OPS and op.inputs:
            tensor_index = op.inputs[0]
            output_of.setdefault(tensor_index, node_name)
            op = producer.get(tensor_index)

    def followers(name: str) -> list[str]:
        """The same-shape chain of foldable ops after `name` (conv -> batch_norm -> relu)."""
        chain, node = [], nodes[name]
        while len(node.users) == 1:
            user = next(iter(node.users))
            if user.op != "call_function" or op_key(user.target) not in _FUSABLE_OPS or user.name not in layers:
                break
            if name not in layers or layers[user.name].shape != layers[name].shape:
                break
            chain.append(user.name)
            node = user
        return chain

    in_scope: dict[str, list[str]] = {}
    for name, scope in scope_of.items():
        if nodes[name].op == "call_function":
            in_scope.setdefault(scope, []).append(name)

    for op in graph.ops:
        seeds = [name for t in op.inputs if t in found for name, _ in found[t].candidates]
        placed = next((t for t in op.inputs if t in found), None)
        seed_perm = found[placed].candidates[-1][1] if placed is not None else None
        for out in op.outputs:
            tensor = graph.tensors[out]
            names: list[str] = []
            if out in output_of:
                names = [output_of[out]]
            else:
                scopes = scope_names.scopes(tensor.name)
                region, frontier = set(), [nodes[name] for name in seeds]
                while frontier:  # IR nodes downstream of the inputs, inside the tensor's scopes
                    node = frontier.pop()
                    for user in node.users:
                        if user.name not in region and user.op == "call_function" and scope_of.get(user.name) in scopes:
                            region.add(user.name)
                            frontier.append(user)
                if not region:
                    # nothing placed upstream (an integer input the converter reshaped, an op fed only
                    # by constants): every IR node of the tensor's scopes is a candidate
                    region = {name for scope in scopes for name in in_scope.get(scope, ())}
                for name in sorted(region, key=order.__getitem__):
                    names += [name, *followers(name)]

            def fitting(names: list[str]) -> list[tuple[str, tuple[int, ...]]]:
                fits = []
                for name in sorted(dict.fromkeys(names), key=order.__getitem__):
                    if name not in layers:
                        continue
                    perm = _choose_perm(layers[name].shape, tensor, op.name, seed_perm)
                    others = [
                        p for p in _other_layouts(layers[name].shape, tensor) if p != perm and op.name == "TRANSPOSE"
                    ]
                    fits += [(name, p) for p in ([perm] if perm is not None else []) + others]
                return fits

            candidates = fitting(names)
            if not candidates and op.name in _DATA_MOVEMENT_OPS:  # same value as its input
                candidates = fitting(seeds)
            if candidates:
                found[out] = TensorCandidates(out, op.name, tuple(candidates))
    return sorted(found.values(), key=lambda c: _position(graph, c.tensor))


def _position(graph: TfliteGraph, tensor_index: int) -> int:
    """Graph inputs first, then tensors in the order the ops produce them."""
    if tensor_index in graph.inputs:
        return -1
    for op in graph.ops:
        if tensor_index in op.outputs:
            return op.index
    return len(graph.ops)


def counterpart_nodes(graph: TfliteGraph, program, layers: dict[str, IRLayer]) -> set[str]:
    """IR layers some runtime tensor may hold, by structure alone: a tensor named after the
    node's module scope with the node's shape (IR, channels-last, or a Conv1d's as CONV_2D runs
    it), or a graph output. What per-layer coverage is measured against (how many of these get
    compared)."""
    from torch.export.graph_signature import OutputKind

    ep = program.exported_program
    scope_names = ScopeNames(ep)
    by_scope: dict[str, list[TfliteTensor]] = {}
    for tensor in graph.tensors:
        for scope in scope_names.scopes(tensor.name):
            by_scope.setdefault(scope, []).append(tensor)
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    found = {
        arg.name
        for arg, spec in zip(out_node.args[0], ep.graph_signature.output_specs)
        if spec.kind == OutputKind.USER_OUTPUT and hasattr(arg, "name") and arg.name in layers
    }
    for node in ep.graph.nodes:
        scope = module_scope(node)
        layer = layers.get(node.name)
        if node.op != "call_function" or layer is None or not scope:
            continue
        if any(
            layout_permutation(layer.shape, t.shape) is not None or _unit_axis_channels_last(layer.shape, t.shape)
            for t in by_scope.get(scope, ())
        ):
            found.add(node.name)
    return found
