"""The sensitive op groups of a float .tflite, each a set of ops a recipe can give another
precision: by kind (LayerNorm, softmax, GELU, attention matmul, recurrent state, division), by
the IR points or weights a ranking puts first, or every op of a type. Found from the file's ops
and the module scopes its tensor names hold (edge/flatbuffer/tensor_names.py:
"blocks.0.ln1/LayerNorm;3"), as ai-edge-quantizer computes them, so its recipes match them.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import OrderedDict

import numpy as np

from tpuedge.quantize.recipes import SensitiveGroup

__all__ = [
    "find_sensitive_groups",
    "ranked_groups",
    "every_op_types",
    "every_op_group",
    "is_every_op",
    "weight_groups",
    "EVERY_OP",
    "GroupScopes",
]

# group key -> the ops' scopes (as ai-edge-quantizer computes them) and their op names
GroupScopes = dict[str, list[tuple[str, str]]]

_NORM_MODULES = re.compile(r"(LayerNorm|RMSNorm|GroupNorm)_?([^/;]*)$")
_RECURRENT_MODULES = re.compile(r"(LSTM|GRU|RNN)_?([^/;]*)$")
# ops with weights: a normalization never lowers to one. The converter can name a layer's
# output after the norm before it (MiniLM's query/key/value projections read
# "embeddings.LayerNorm/LayerNorm;encoder.layer.0.attention.self.query/Linear"): grouped with
# the norm, they went float with it.
_WEIGHTED_OPS = frozenset({"FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "CONV_3D"})


def _module_path(scope: str) -> str:
    """The module an op belongs to: the first module scope of its output's name ("blocks.0.ln1/LayerNorm",
    the module's qualified name and class), up to the ';' before the next."""
    return scope.split(";", 1)[0]


def find_sensitive_groups(float_tflite: bytes) -> tuple[list[SensitiveGroup], GroupScopes]:
    """Sensitive groups (LayerNorm, softmax, GELU, attention matmul, recurrent state, a fused
    sequence LSTM, division by a computed tensor) in graph order."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl  # its scopes are what its recipes match

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    subgraph = model.subgraphs[0]
    op_names = tflite_file.operator_names(model)
    constant = {i for i, t in enumerate(subgraph.tensors) if tflite_file.is_constant(model, t)}
    groups: "OrderedDict[str, tuple[str, list[tuple[str, str]]]]" = OrderedDict()

    def add(key: str, kind: str, scope: str, op: str) -> None:
        groups.setdefault(key, (kind, []))[1].append((scope, op))

    # the module paths of fused sequence LSTMs (edge/litert/sequence_lstm.py): they and the ops around
    # them (the clearing step's PAD and CONCATENATION, the SLICE after) compute in float
    fused = {
        _module_path(tfl.get_op_scope(op, subgraph.tensors))
        for op in subgraph.operators or []
        if op_names[op.opcodeIndex] == "UNIDIRECTIONAL_SEQUENCE_LSTM"
    }
    for index, op in enumerate(subgraph.operators or []):
        name = op_names[op.opcodeIndex]
        scope = tfl.get_op_scope(op, subgraph.tensors)
        path = _module_path(scope)
        module = path.rsplit("/", 1)[-1]
        norm, recurrent = _NORM_MODULES.search(module), _RECURRENT_MODULES.search(module)
        if path in fused:
            add(f"fused_recurrent:{path}", "fused_recurrent", scope, name)
        elif recurrent and "/" in path:
            add(f"recurrent_state:{path}", "recurrent_state", scope, name)
        elif norm and "/" in path and name not in _WEIGHTED_OPS:
            add(f"layer_norm:{path}", "layer_norm", scope, name)
        elif name == "RSQRT":
            add(f"layer_norm:op{index}", "layer_norm", scope, name)
        elif name == "SOFTMAX":
            add(f"softmax:op{index}", "softmax", scope, name)
        elif name == "GELU":
            add(f"gelu:op{index}", "gelu", scope, name)
        elif name == "BATCH_MATMUL" and not any(i in constant for i in op.inputs):
            add(f"attention_matmul:op{index}", "attention_matmul", scope, name)
        elif name == "DIV" and op.inputs[1] not in constant:  # int8 stops at a divisor on its zero point
            add(f"division:op{index}", "division", scope, name)
    result = [
        SensitiveGroup(key, kind, tuple(f"{op} {_module_path(s)}" for s, op in members))
        for key, (kind, members) in groups.items()
    ]
    return result, {key: members for key, (_, members) in groups.items()}


def ranked_groups(float_tflite: bytes, ranking, *, limit: int = 24, floor: float = 2e-4):
    """Groups for the IR points `ranking` (quantize/sensitivity.py, most sensitive first) puts
    above `floor` loss (and 1% of the first's). A point's group is the flatbuffer ops of its own
    module scope (litert-torch writes the module path into tensor names) and the ops that read
    their outputs: a 16-bit tensor only helps if the ops reading it take 16 bits too (an int8
    op requantizes its input to int8). An op already in a higher-ranked group is not repeated
    (upgrades go in rank order); one in a kind-based group may be (its later recipe entry wins)."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    subgraph = model.subgraphs[0]
    op_names = tflite_file.operator_names(model)
    ops = [(tfl.get_op_scope(op, subgraph.tensors), op_names[op.opcodeIndex], op) for op in subgraph.operators or []]
    readers: dict[int, list[int]] = {}
    for i, (_, _, op) in enumerate(ops):
        for t in op.inputs if op.inputs is not None else ():
            readers.setdefault(int(t), []).append(i)
    by_module: dict[str, list[int]] = {}
    for i, (scope, _, _) in enumerate(ops):
        by_module.setdefault(_module_path(scope), []).append(i)
    # an op that writes a model output and reads a ranked point's value becomes a float island
    # instead (kind "ranked_output"): 16-bit there would leave the model's output 16-bit, since
    # ai-edge-quantizer keeps float I/O for 8-bit tensors only, and 8-bit would undo the upgrade
    outputs = {int(t) for t in subgraph.outputs}
    writes_output = {i for i, (_, _, op) in enumerate(ops) if outputs & {int(t) for t in op.outputs}}

    def value_readers(i: int) -> list[int]:
        """The ops reading op i's outputs, and through a reshape the ops reading that: the converter
        puts a RESHAPE in front of a decomposed LayerNorm, and an int16 RESHAPE alone hands an int8
        MEAN a requantized copy (the upgrade then changed nothing: an outlier-channel Linear's
        int16 scored as all-int8 did)."""
        found = []
        for t in ops[i][2].outputs:
            for r in readers.get(int(t), []):
                found += [r, *value_readers(r)] if ops[r][1] in _SHAPE_OPS else [r]
        return found

    taken: set[str] = set()
    worst = ranking[0].loss if ranking else 0.0
    groups, scopes = [], {}
    for point in ranking:
        if sum(g.kind == "ranked" for g in groups) >= limit or point.loss < max(floor, 0.01 * worst):
            break
        producers = by_module.get(point.scope, []) if point.scope else []
        members: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
        for i in producers + [r for p in producers for r in value_readers(p)]:
            scope, name, _ = ops[i]
            if scope not in taken:
                taken.add(scope)
                members[i in writes_output].append((scope, name))
        for at_output, kind, key in (
            (False, "ranked", f"ranked:{point.node}"),
            (True, "ranked_output", f"ranked:{point.node}:output"),
        ):
            if members[at_output]:
                groups.append(
                    SensitiveGroup(key, kind, tuple(f"{op} {_module_path(s)}" for s, op in members[at_output]))
                )
                scopes[key] = members[at_output]
    return groups, scopes


def weight_groups(float_tflite: bytes, ranking, elements_cap: int) -> tuple[list[SensitiveGroup], GroupScopes]:
    """Groups for the IR weight tensors `ranking` (quantize/weight_sensitivity.py, costliest
    first): each the flatbuffer ops reading that tensor, found by value (the float converter
    copies a weight's values, in its own layout: the same sorted values), else among its
    module's ops one reading a constant of as many elements (the converter stores some weights
    changed: 27 of MiniLM-L6's 40 2-D tensors, its query/key/value and FFN-up weights among
    them; an op writing a model output is named for the output, so only its value finds it).
    Groups are added while their weights' elements stay within `elements_cap` (float32 costs 3
    bytes an element more than int8); a weight whose ops are taken or not found is skipped."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    subgraph = model.subgraphs[0]
    op_names = tflite_file.operator_names(model)
    ops = [(tfl.get_op_scope(op, subgraph.tensors), op_names[op.opcodeIndex], op) for op in subgraph.operators or []]
    readers_by_size: dict[int, dict[int, list[int]]] = {}  # elements -> float constant tensor -> ops reading it
    for i, (_, _, op) in enumerate(ops):
        for t in op.inputs if op.inputs is not None else ():
            tensor = subgraph.tensors[int(t)] if int(t) >= 0 else None
            if tensor is not None and tensor.type == 0 and tflite_file.is_constant(model, tensor):  # FLOAT32
                size = int(np.prod(tensor.shape, dtype=np.int64)) if tensor.shape is not None else 0
                readers_by_size.setdefault(size, {}).setdefault(int(t), []).append(i)

    @functools.lru_cache(maxsize=None)
    def values_key(t: int) -> bytes:
        values = tflite_file.constant_array(float_tflite, model, subgraph.tensors[t])
        return hashlib.sha256(np.sort(values.astype(np.float32))).digest()

    taken: set[int] = set()
    groups, scopes, elements = [], {}, 0
    for weight in ranking:
        if elements + weight.elements > elements_cap:
            continue
        candidates = readers_by_size.get(weight.elements, {})
        key = hashlib.sha256(np.sort(weight.values.astype(np.float32).ravel())).digest()
        found = [i for t, readers in candidates.items() if values_key(t) == key for i in readers]
        if not found and weight.scope:
            found = [i for readers in candidates.values() for i in readers if _module_path(ops[i][0]) == weight.scope]
        found = [i for i in dict.fromkeys(found) if i not in taken]
        if not found:
            continue
        taken.update(found)
        elements += weight.elements
        key_name = f"weights:{weight.name}"
        members = [(ops[i][0], ops[i][1]) for i in found]
        groups.append(SensitiveGroup(key_name, "ranked_weights", tuple(f"{op} {_module_path(s)}" for s, op in members)))
        scopes[key_name] = members
    return groups, scopes


# The group of every op (the int8 search's whole-model int16 rung). Its GroupScopes entry lists
# (".*", ai-edge-quantizer op name) per op type: quantizer_recipe gives each type its own entry,
# so a type the target can't run at 16 bits is left out by name, wherever its scope is.
EVERY_OP = "every_op"


def every_op_types(float_tflite: bytes) -> list[tuple[str, str, int]]:
    """(flatbuffer builtin name, ai-edge-quantizer op name, count) of each op type in
    `float_tflite` that ai-edge-quantizer has a 16x8 recipe for, in graph order: read once per
    model, the rung's groups are made from it."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    names = tflite_file.operator_names(model)
    counts: "OrderedDict[tuple[str, str], int]" = OrderedDict()
    for op in model.subgraphs[0].operators or []:
        quantizer_name = tfl.TFL_OP_CODE_TO_NAME.get(model.operatorCodes[op.opcodeIndex].builtinCode)
        if quantizer_name is not None and _takes_16x8(quantizer_name):
            pair = (names[op.opcodeIndex], quantizer_name)
            counts[pair] = counts.get(pair, 0) + 1
    return [(name, quantizer_name, count) for (name, quantizer_name), count in counts.items()]


def every_op_group(
    types: list[tuple[str, str, int]], excluded: frozenset[str] = frozenset()
) -> tuple[SensitiveGroup, list[tuple[str, str]]]:
    """(the group of every op type in `types` (every_op_types) but those named in `excluded`
    (flatbuffer builtin names), its GroupScopes entry). The key names what is left out, so each
    exclusion is its own recipe."""
    kept = [(name, quantizer_name, count) for name, quantizer_name, count in types if name not in excluded]
    key = EVERY_OP + (f" but {'+'.join(sorted(excluded))}" if excluded else "")
    group = SensitiveGroup(key, "every_op", tuple(f"{name} x{count}" for name, _, count in kept))
    return group, [(".*", quantizer_name) for _, quantizer_name, _ in kept]


@functools.lru_cache(maxsize=None)
def _takes_16x8(quantizer_op: str) -> bool:
    """Whether ai-edge-quantizer's policy has 16-bit activations with int8 weights for the op (it
    refuses a recipe that names an op without them, SQUARED_DIFFERENCE; "*" skips such ops)."""
    from ai_edge_quantizer import recipe_manager

    try:
        recipe_manager.RecipeManager().add_static_config(".*", quantizer_op, activation_num_bits=16, weight_num_bits=8)
    except ValueError:
        return False
    return True


def is_every_op(key: str) -> bool:
    return key == EVERY_OP or key.startswith(EVERY_OP + " but ")


# ops that move values without computing (a value read through them is read by their readers)
_SHAPE_OPS = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})
