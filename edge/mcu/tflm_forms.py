"""The converter's int8 model rewritten into forms TFLite-Micro runs (`tflm_forms`).

- SELECT becomes SELECT_V2. The converter writes SELECT for a `torch.where` over equal shapes;
  TFLM has only SELECT_V2, which computes the same thing (and also broadcasts).
- Embedding tables are stored in int8: a float lookup folded into its QUANTIZE (below).
- ARG_MAX and ARG_MIN read the integer tensor their DEQUANTIZE reads. ai-edge-quantizer has no
  recipe for them and computes them in float after a DEQUANTIZE; dequantizing (scale > 0) keeps
  the order of the values and their ties, so the indices are the same, and TFLM's int8 kernels
  compute them (a greedy decoder's argmax over its logits; TFLM's take no int16 input).
- LESS, LESS_EQUAL, GREATER and GREATER_EQUAL likewise (a mask `x > t`): their int8 inputs, each
  on its own scale (TFLM's kernel rescales them), a constant of one value stored in int8 on a
  scale that holds it exactly.

litert-torch lowers `nn.Embedding` to EMBEDDING_LOOKUP, and ai-edge-quantizer's static int8
recipe leaves that op in float: the strict int8 model then holds a float32 table, an op that
computes in float (which the mcu build refuses) and a QUANTIZE of the rows it looked up.
Quantizing a row after looking it up equals looking it up in a table quantized the same way, so
the table is written in int8 with that QUANTIZE's scale and zero point, the lookup writes the
QUANTIZE's int8 output itself, and the QUANTIZE goes: the same int8 values bit for bit, a
quarter of the table's bytes, and TFLM's int8 EMBEDDING_LOOKUP (a row copy) runs it.

Where the search gave the rows 16 bits (the QUANTIZE writes int16), TFLM has no int16 lookup:
the table is written in int8 on its own min/max, the lookup writes int8 rows, and the QUANTIZE
stays, re-quantizing them to int16. Not bit for bit: the rows carry the table's int8 rounding,
as every int8 weight does.

Only the plain case is folded: a float32 constant table that nothing else reads, whose looked-up
rows only one per-tensor int8 or int16 QUANTIZE reads. Anything else is left as converted, so
the build's float-op check still reports it.
"""

from __future__ import annotations

import numpy as np

from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.quantize.activation_ranges import int8_affine

__all__ = ["tflm_forms", "tflm_forms_in_place"]


def tflm_forms(tflite: bytes) -> tuple[bytes, dict[str, int]]:
    """(the model in forms TFLM runs, {what changed: how many}) -- only non-zero counts; the
    input bytes themselves when nothing changed. edge/mcu/tflm_ops.py's rule knows both rewrites."""
    model = tflite_file.read_model(tflite)
    changes = tflm_forms_in_place(model)
    return (tflite_file.write_model(model) if changes else tflite), changes


def tflm_forms_in_place(model) -> dict[str, int]:
    """`tflm_forms` on a parsed model (changed in place): {what changed: how many}, non-zero only."""
    changes = {
        "select_as_select_v2": _select_as_select_v2(model),
        "int8_lookup_tables": _fold_lookup_quantize(model),
        "integer_arg_extremes": _integer_operands(model, ("ARG_MAX", "ARG_MIN")),
        "integer_comparisons": _integer_operands(model, ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")),
    }
    return {k: v for k, v in changes.items() if v}


def _select_as_select_v2(model) -> int:
    """Every SELECT becomes a SELECT_V2, in place; how many ops changed."""
    schema = tflite_file.schema
    names = tflite_file.operator_names(model)
    codes = {i for i, name in enumerate(names) if name == "SELECT"}
    for i in codes:
        code = model.operatorCodes[i]
        code.builtinCode = schema.BuiltinOperator.SELECT_V2
        code.deprecatedBuiltinCode = min(
            schema.BuiltinOperator.SELECT_V2, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES
        )
        code.version = 1
    changed = 0
    for graph in model.subgraphs:
        for op in graph.operators:
            if op.opcodeIndex in codes:
                op.builtinOptionsType = schema.BuiltinOptions.SelectV2Options
                op.builtinOptions = schema.SelectV2OptionsT()
                changed += 1
    return changed


def _fold_lookup_quantize(model) -> int:
    """Each foldable float lookup + QUANTIZE becomes one int8 lookup (and, for int16 rows or a
    table several lookups share, the QUANTIZE re-quantizing its int8 rows), in place; how many."""
    names = tflite_file.operator_names(model)
    schema = tflite_file.schema
    folded = 0
    for graph in model.subgraphs:
        readers: dict[int, list[int]] = {}
        for i, op in enumerate(graph.operators):
            for t in op.inputs:
                readers.setdefault(int(t), []).append(i)
        outputs = {int(t) for t in graph.outputs}
        lookups: dict[int, list[tuple]] = {}  # table -> (lookup, its rows' sole QUANTIZE) of every lookup reading it
        for index, op in enumerate(graph.operators):
            if names[op.opcodeIndex] == "EMBEDDING_LOOKUP":
                rows = int(op.outputs[0])
                quantize = _sole_quantize(graph, names, readers.get(rows, []), rows in outputs)
                lookups.setdefault(int(op.inputs[1]), []).append(
                    (index, None if quantize is None else readers[rows][0])
                )
        drop: set[int] = set()
        for table, pairs in lookups.items():
            table_tensor = graph.tensors[table]
            if (
                any(q is None for _, q in pairs)
                or sorted(readers[table]) != sorted(i for i, _ in pairs)
                or table_tensor.type != schema.TensorType.FLOAT32
                or not tflite_file.is_constant(model, table_tensor)
                or sum(1 for t in graph.tensors if t.buffer == table_tensor.buffer) != 1
            ):
                continue  # a table read otherwise, or a buffer shared with another tensor, keeps its float bytes
            drop |= _int8_table(model, graph, table_tensor, pairs)
            folded += len(pairs)
        graph.operators = [op for i, op in enumerate(graph.operators) if i not in drop]
    return folded


def _int8_table(model, graph, table_tensor, pairs) -> set[int]:
    """Store the table in int8 for its (lookup, QUANTIZE) operator pairs; the QUANTIZEs it made
    unneeded (to drop)."""
    from tpuedge.quantize.affine import quantize as affine_quantize

    schema = tflite_file.schema
    buffer = model.buffers[table_tensor.buffer]
    table_values = np.frombuffer(bytes(bytearray(buffer.data)), np.float32)
    lookup, quantize = pairs[0]
    target = graph.tensors[int(graph.operators[quantize].outputs[0])]
    if len(pairs) == 1 and target.type == schema.TensorType.INT8:  # the QUANTIZE's own int8 values: it goes
        scale, zero, _ = tflite_file.tensor_quantization(target)
        scale, zero = float(scale[0]), int(zero[0])
        graph.operators[lookup].outputs = np.array([int(graph.operators[quantize].outputs[0])], np.int32)
        drop = {quantize}
    else:  # int16 rows (no int16 lookup in TFLM), or several lookups each with its own QUANTIZE:
        # int8 rows on the table's own range, each re-quantized by its QUANTIZE
        scale, zero = _table_grid(table_values)
        for lookup, _ in pairs:
            rows_tensor = graph.tensors[int(graph.operators[lookup].outputs[0])]
            rows_tensor.type = schema.TensorType.INT8
            rows_tensor.quantization = _per_tensor(schema, scale, zero)
        drop = set()
    buffer.data = affine_quantize(table_values, scale, zero, np.int8, ties="away").view(np.uint8)  # as TFLM's QUANTIZE
    table_tensor.type = schema.TensorType.INT8
    table_tensor.quantization = _per_tensor(schema, scale, zero)
    return drop


# ops whose result depends only on the order of the inputs they name: they read int8 as they read
# its dequantized values (a comparison's two int8 inputs may differ in scale: TFLM rescales them)
_ORDER_ONLY = {
    "ARG_MAX": (0,),
    "ARG_MIN": (0,),
    "LESS": (0, 1),
    "LESS_EQUAL": (0, 1),
    "GREATER": (0, 1),
    "GREATER_EQUAL": (0, 1),
}


def _integer_operands(model, kinds) -> int:
    """Each op of `kinds` (of _ORDER_ONLY) whose float inputs are all DEQUANTIZEs of per-tensor int8
    tensors (scale > 0; below 1 for a comparison), or for a comparison a constant of one value,
    reads int8 instead, in place:
    the tensor dequantized, or the constant in int8 on a scale that holds it (value = 127 steps).
    A DEQUANTIZE left unread goes. How many ops changed."""
    names = tflite_file.operator_names(model)
    changed = 0
    for graph in model.subgraphs:
        producer = {int(t): i for i, op in enumerate(graph.operators) for t in op.outputs}
        bypassed = set()
        for op in graph.operators:
            name = names[op.opcodeIndex]
            if name not in kinds:
                continue
            inputs = [int(t) for t in op.inputs]
            found = {
                i: _int8_source(
                    model, graph, names, producer, inputs[i], constant_ok=name not in ("ARG_MAX", "ARG_MIN")
                )
                for i in _ORDER_ONLY[name]
            }
            if any(v is None for v in found.values()):
                continue
            for i, source in found.items():
                if inputs[i] in producer:
                    bypassed.add(producer[inputs[i]])
                inputs[i] = source if source is not _CONSTANT else _int8_constant(model, graph, inputs[i])
            op.inputs = np.array(inputs, np.int32)
            changed += 1
        _int8_outputs(model, graph, [graph.operators[i] for i in bypassed])
        read = {int(t) for op in graph.operators for t in op.inputs} | {int(t) for t in graph.outputs}
        graph.operators = [
            op for i, op in enumerate(graph.operators) if i not in bypassed or int(op.outputs[0]) in read
        ]
    return changed


def _int8_outputs(model, graph, dequantizes) -> None:
    """A model output that one of `dequantizes` wrote becomes the int8 tensor it read: the quantizer
    returned the dequantized values there only because the float op read them too (`return
    logits, logits.argmax(-1)`), where every other output of an integer model is integer."""
    moved = {int(op.outputs[0]): int(op.inputs[0]) for op in dequantizes}
    index = model.subgraphs.index(graph)
    graph.outputs = np.array([moved.get(int(t), int(t)) for t in graph.outputs], np.int32)
    for signature in model.signatureDefs or []:
        if int(signature.subgraphIndex) == index:
            for output in signature.outputs:
                output.tensorIndex = moved.get(int(output.tensorIndex), int(output.tensorIndex))


_CONSTANT = object()


def _int8_source(model, graph, names, producer, tensor: int, *, constant_ok: bool):
    """The per-tensor int8 tensor `tensor` is a DEQUANTIZE of; _CONSTANT for a float32 constant
    of one value (where `constant_ok`); None otherwise."""
    schema = tflite_file.schema
    t = graph.tensors[tensor]
    if tensor not in producer:
        if not (constant_ok and t.type == schema.TensorType.FLOAT32 and tflite_file.is_constant(model, t)):
            return None
        values = np.frombuffer(bytes(bytearray(model.buffers[t.buffer].data)), np.float32)
        one_value = values.size and np.all(values == values[0]) and abs(float(values[0])) < 127.0
        return _CONSTANT if one_value else None
    op = graph.operators[producer[tensor]]
    if names[op.opcodeIndex] != "DEQUANTIZE":
        return None
    source = graph.tensors[int(op.inputs[0])]
    scale, _, _ = tflite_file.tensor_quantization(source)
    # TFLM's comparisons rescale each input by a multiplier below 1 (they abort on a scale of 1 or more)
    ok = (
        source.type == schema.TensorType.INT8
        and scale.size == 1
        and 0 < float(scale[0]) < (1 if constant_ok else np.inf)
    )
    return int(op.inputs[0]) if ok else None


def _int8_constant(model, graph, tensor: int) -> int:
    """A new int8 tensor holding float constant `tensor`'s one value (|value| < 127) exactly: 127
    steps of |value| / 127, zero on a step of 1/128 (every scale below 1, as TFLM's comparisons
    need); its index."""
    import copy

    schema = tflite_file.schema
    old = graph.tensors[tensor]
    values = np.frombuffer(bytes(bytearray(model.buffers[old.buffer].data)), np.float32)
    value = float(values[0])
    scale = abs(value) / 127.0 if value else 1.0 / 128
    buffer = schema.BufferT()
    buffer.data = np.full(values.shape, 0 if not value else (127 if value > 0 else -127), np.int8).view(np.uint8)
    model.buffers.append(buffer)
    new = copy.copy(old)
    new.type, new.buffer, new.quantization = (
        schema.TensorType.INT8,
        len(model.buffers) - 1,
        _per_tensor(schema, scale, 0),
    )
    graph.tensors.append(new)
    return len(graph.tensors) - 1


def _table_grid(values: np.ndarray) -> tuple[float, int]:
    """(scale, zero point) of per-tensor int8 over the table's min/max, by the one int8 range rule
    (zero included, so a zero entry stays exact)."""
    scale, zero = int8_affine(float(values.min(initial=0.0)), float(values.max(initial=0.0)))
    return float(scale), int(zero)


def _sole_quantize(graph, names: list[str], reader_ops: list[int], is_output: bool):
    """The one per-tensor int8 or int16 QUANTIZE that is the rows' only reader, or None."""
    if is_output or len(reader_ops) != 1:
        return None
    op = graph.operators[reader_ops[0]]
    if names[op.opcodeIndex] != "QUANTIZE":
        return None
    out = graph.tensors[int(op.outputs[0])]
    scale, _, _ = tflite_file.tensor_quantization(out)
    if out.type not in (tflite_file.schema.TensorType.INT8, tflite_file.schema.TensorType.INT16) or scale.size != 1:
        return None
    return op


def _per_tensor(schema, scale: float, zero: int):
    q = schema.QuantizationParametersT()
    q.scale, q.zeroPoint, q.quantizedDimension = [scale], [zero], 0
    return q
