"""The one reader (and writer) of .tflite flatbuffers, on the schema binding ai-edge-litert ships.

Every part of tpuedge that looks inside a .tflite goes through `read_model`: it checks the bytes
before decoding them, so a truncated, random or empty file is a `UserError` naming the file and
what is wrong, never a `struct.error` from deep inside the flatbuffers runtime. Python's
flatbuffers package has no Verifier, so the check is structural: the "TFL3" file identifier,
every offset and vector inside the file (a full decode of the object tree), every tensor,
buffer and opcode index in range, and buffers stored after the flatbuffer (`buffer.offset/size`,
which ai-edge-quantizer writes for large models) inside the file. The readers that skip the
object tree for speed (`tensor_names`, `builtin_names`, `tensor_name_fields`, `op_scales`) check
the same header and turn a decode error into the same `UserError`. `write_model` packs through
edge/flatbuffer/model_packing.py.

`DTYPE_NAMES` is the one TensorType -> numpy-name table; `operator_names` gives each opcode its
builtin name ("CONV_2D") or "CUSTOM:<name>".
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

# ai-edge-litert is a direct dependency, and its binding is the one the converter stack
# (litert-torch, ai-edge-quantizer) reads and writes with. About 0.1 s to import.
from ai_edge_litert import schema_py_generated as schema

from tpuedge.edge.flatbuffer.model_packing import pack
from tpuedge.shared_ir.errors import UserError

__all__ = [
    "FILE_IDENTIFIER",
    "DTYPE_NAMES",
    "read_model",
    "write_model",
    "compact_model",
    "operator_names",
    "dtype_name",
    "is_external",
    "buffer_nbytes",
    "is_constant",
    "constant_array",
    "tensor_bytes",
    "tensor_quantization",
    "text",
    "schema",
    "op_scales",
    "tensor_names",
    "tensor_name_fields",
    "builtin_names",
    "operator_wiring",
]

FILE_IDENTIFIER = b"TFL3"
_U32 = struct.Struct("<I")
_TENSOR_NAME_SLOT = 10  # Tensor.name's vtable slot (the generated binding's Name() reads it)


def _enum_names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


# TensorType code -> numpy-style name ("float32", "int8", "bfloat16", "int4", ...).
DTYPE_NAMES: dict[int, str] = {code: name.lower() for code, name in _enum_names(schema.TensorType).items()}
_BUILTIN_NAMES = _enum_names(schema.BuiltinOperator)


def dtype_name(code: int) -> str:
    return DTYPE_NAMES.get(int(code), f"type{int(code)}")


def text(value: Any) -> str:
    """A flatbuffer string (bytes) as str; None as ""."""
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else str(value or "")


def _fail(source: str, problem: str) -> UserError:
    return UserError(
        f"{source} is not a valid .tflite model: {problem}. The file may be truncated or not a "
        "LiteRT flatbuffer at all; rebuild it (`tpuedge build ... --target android|mcu`) or copy it again."
    )


# What the flatbuffers runtime raises when an offset or length points outside the bytes.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, RecursionError)


def read_model(data: bytes, source: str | Path | None = None):
    """The checked object tree (`schema.ModelT`) of a .tflite; `UserError` when it is malformed.

    `source` names the file in the message (default: "the .tflite bytes").
    """
    where = _where(source)
    data = bytes(data)
    _check_header(data, where)
    with _decoding(data, where):
        model = schema.ModelT.InitFromPackedBuf(data, 0)
    _check_indices(model, len(data), where)
    return model


def _where(source: str | Path | None) -> str:
    return str(source) if source is not None else "the .tflite bytes"


def _check_header(data: bytes, where: str) -> None:
    if len(data) == 0:
        raise _fail(where, "it is empty (0 bytes)")
    if len(data) < 8:
        raise _fail(where, f"it is only {len(data)} bytes long")
    if data[4:8] != FILE_IDENTIFIER:
        raise _fail(
            where,
            f"it lacks the TFLite file identifier {FILE_IDENTIFIER.decode()!r} at bytes 4-8 (found {bytes(data[4:8])!r})",
        )
    (root,) = struct.unpack_from("<I", data, 0)
    if root + 4 > len(data):
        raise _fail(where, f"its root table offset {root} lies past the end of its {len(data)} bytes")


@contextmanager
def _decoding(data: bytes, where: str):
    try:
        yield
    except _DECODE_ERRORS:
        raise _fail(where, f"an offset or length inside it points outside its {len(data)} bytes") from None


def _root_in_place(data: bytes, where: str):
    """The file's root table read in place (no object tree, no weight copies): the readers below
    that skip `read_model`'s full decode for speed check the header the same way, and decode
    inside `_decoding`, so a damaged file gives the same UserError."""
    _check_header(data, where)
    with _decoding(data, where):
        return schema.Model.GetRootAs(data, 0)


def _in_range(where: str, what: str, index: int, count: int) -> int:
    if not 0 <= index < count:
        raise _fail(where, f"{what} {index} is out of range ({count})")
    return index


def _check_indices(model, size: int, where: str) -> None:
    subgraphs, buffers, codes = model.subgraphs or [], model.buffers or [], model.operatorCodes or []
    if not subgraphs:
        raise _fail(where, "it has no subgraph")
    for i, buf in enumerate(buffers):
        if is_external(buf) and int(buf.offset) + int(buf.size) > size:
            raise _fail(
                where,
                f"buffer {i} is stored at bytes {buf.offset}..{buf.offset + buf.size}, past the file's end ({size})",
            )
    for g, sg in enumerate(subgraphs):
        tensors = sg.tensors or []
        n = len(tensors)

        def check(kind: str, indices, allow_missing: bool = False) -> None:
            for t in [] if indices is None else indices:
                if not (-1 if allow_missing else 0) <= int(t) < n:
                    raise _fail(where, f"subgraph {g} refers to tensor {int(t)} ({kind}) but has {n} tensors")

        check("a subgraph input", sg.inputs)
        check("a subgraph output", sg.outputs)
        for t, tensor in enumerate(tensors):
            if not 0 <= int(tensor.buffer) < max(len(buffers), 1):
                raise _fail(
                    where, f"tensor {t} of subgraph {g} uses buffer {tensor.buffer} but there are {len(buffers)}"
                )
        for o, op in enumerate(sg.operators or []):
            if not 0 <= int(op.opcodeIndex) < len(codes):
                raise _fail(
                    where, f"operator {o} of subgraph {g} uses opcode {op.opcodeIndex} but there are {len(codes)}"
                )
            check(f"an input of operator {o}", op.inputs, allow_missing=True)
            check(f"an output of operator {o}", op.outputs, allow_missing=True)
    for sig in model.signatureDefs or []:
        g = int(sig.subgraphIndex)
        if not 0 <= g < len(subgraphs):
            raise _fail(
                where, f"signature {text(sig.signatureKey)!r} names subgraph {g} but there are {len(subgraphs)}"
            )
        n = len(subgraphs[g].tensors or [])
        for tm in (sig.inputs or []) + (sig.outputs or []):
            if not 0 <= int(tm.tensorIndex) < n:
                raise _fail(
                    where, f"signature {text(sig.signatureKey)!r} names tensor {tm.tensorIndex} but there are {n}"
                )


def write_model(model, external_from: bytes | None = None) -> bytes:
    """Serialize a `ModelT` (with the "TFL3" identifier).

    `external_from`: the bytes `model` was read from. Its buffers stored after the flatbuffer
    (offset/size, as ai-edge-quantizer writes large models) are then stored after the new one,
    16-byte aligned, with their offsets moved; without it, offsets are written as they are.
    """
    external = [b for b in model.buffers or [] if is_external(b)] if external_from is not None else []
    if not external:
        return pack(model, FILE_IDENTIFIER)
    payloads = [bytes(external_from[int(b.offset) : int(b.offset) + int(b.size)]) for b in external]
    for b in external:  # placeholders as wide as any real offset, so the second pack has this length
        b.offset = 1 << 40
    head = pack(model, FILE_IDENTIFIER)
    position, layout = len(head), []
    for b, payload in zip(external, payloads):
        position = -(-position // 16) * 16
        b.offset = position
        layout.append((position, payload))
        position += len(payload)
    head = pack(model, FILE_IDENTIFIER)
    out = bytearray(head)
    for start, payload in layout:
        out += bytes(start - len(out)) + payload
    return bytes(out)


def compact_model(data: bytes) -> bytes:
    """The model in `data` written again by `write_model`: the same model, its equal vectors
    written once (edge/flatbuffer/model_packing.py); litert-torch's and ai-edge-quantizer's writers give every
    tensor its own. Buffers stored after the flatbuffer stay there."""
    return write_model(read_model(data), external_from=data)


def operator_names(model) -> list[str]:
    """Name of each operator code, by opcode index: "CONV_2D", ... or "CUSTOM:<custom code>"."""
    names = []
    for code in model.operatorCodes or []:
        number = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        if number == schema.BuiltinOperator.CUSTOM:
            names.append(f"CUSTOM:{text(code.customCode) or '?'}")
        else:
            names.append(_BUILTIN_NAMES.get(number, f"BUILTIN_{number}"))
    return names


def operator_wiring(model) -> list[tuple[str, list[int], list[int]]]:
    """The first subgraph's operators in order: (name, input tensor indices, output tensor indices),
    what two files compare by when their tensor names may differ."""
    names = operator_names(model)
    return [(names[op.opcodeIndex], list(op.inputs), list(op.outputs)) for op in model.subgraphs[0].operators or []]


def tensor_names(data: bytes, source: str | Path | None = None) -> list[list[str]]:
    """Each subgraph's tensor names, read in place (no object tree, no weight copies)."""
    where = _where(source)
    model = _root_in_place(data, where)
    with _decoding(data, where):
        graphs = [model.Subgraphs(i) for i in range(model.SubgraphsLength())]
        return [[text(g.Tensors(j).Name()) for j in range(g.TensorsLength())] for g in graphs]


def builtin_names(data: bytes, source: str | Path | None = None) -> list[str]:
    """The builtin name of each operator code ("" for one this schema does not know), read in place."""
    where = _where(source)
    model = _root_in_place(data, where)
    with _decoding(data, where):
        codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
        return [_BUILTIN_NAMES.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "") for c in codes]


def tensor_name_fields(data: bytes, source: str | Path | None = None) -> list[tuple[int, int, int]]:
    """Where each tensor's name lies in `data`, across subgraphs in `tensor_names`' order: (position
    of the tensor's offset to its name, the string's position, its length); zeros for a tensor
    without a name field. Read in place, for rewriting names where they lie."""
    where = _where(source)
    model = _root_in_place(data, where)
    fields = []
    with _decoding(data, where):
        for i in range(model.SubgraphsLength()):
            graph = model.Subgraphs(i)
            for j in range(graph.TensorsLength()):
                table = graph.Tensors(j)._tab
                slot = table.Offset(_TENSOR_NAME_SLOT)
                field = table.Pos + slot if slot else 0
                string = field + _U32.unpack_from(data, field)[0] if slot else 0
                fields.append((field, string, _U32.unpack_from(data, string)[0] if slot else 0))
    return fields


def op_scales(
    data: bytes, builtins: frozenset[str], source: str | Path | None = None
) -> list[tuple[int, str, str, list, list]]:
    """(op index, builtin, output dtype, input scales, output scales) of each op of the first
    subgraph named in `builtins`; a scale is None for a tensor without one (or no tensor). Read
    in place, without unpacking the model (`read_model` copies every weight: 0.3 s on MiniLM)."""
    where = _where(source)
    names = builtin_names(data, source)
    model = _root_in_place(data, where)
    with _decoding(data, where):
        graph = model.Subgraphs(0)
        tensors = graph.TensorsLength()

        def scale(index: int):
            if index < 0:
                return None
            q = graph.Tensors(_in_range(where, "an operator's tensor", index, tensors)).Quantization()
            return float(q.Scale(0)) if q is not None and q.ScaleLength() else None

        found = []
        for i in range(graph.OperatorsLength()):
            op = graph.Operators(i)
            name = names[_in_range(where, f"operator {i}'s opcode", op.OpcodeIndex(), len(names))]
            if name in builtins:
                outputs = [int(op.Outputs(k)) for k in range(op.OutputsLength())]
                output = _in_range(where, "an operator's tensor", outputs[0], tensors) if outputs else None
                found.append(
                    (
                        i,
                        name,
                        dtype_name(graph.Tensors(output).Type()) if outputs else "",
                        [scale(int(op.Inputs(k))) for k in range(op.InputsLength())],
                        [scale(t) for t in outputs],
                    )
                )
        return found


def is_external(buffer) -> bool:
    """Stored after the flatbuffer (offset/size); offset 1 is the converter's 'empty' marker."""
    return bool(buffer.offset) and int(buffer.offset) > 1


def buffer_nbytes(buffer) -> int:
    """Bytes of constant data in a buffer, inline or stored after the flatbuffer."""
    if is_external(buffer):
        return int(buffer.size)
    return 0 if buffer.data is None else int(np.asarray(buffer.data).nbytes)


def is_constant(model, tensor) -> bool:
    """A tensor whose value is stored in the file (a weight), not computed at run time."""
    buffers = model.buffers or []
    return 0 < int(tensor.buffer) < len(buffers) and buffer_nbytes(buffers[int(tensor.buffer)]) > 0


def constant_array(data: bytes, model, tensor) -> np.ndarray | None:
    """A constant tensor's value (flat, in its stored dtype) from the file's bytes `data`, inline
    or stored after the flatbuffer; None for a computed tensor or a dtype numpy has no width for."""
    if not is_constant(model, tensor):
        return None
    try:
        dtype = np.dtype(dtype_name(tensor.type))
    except TypeError:
        return None
    buffer = model.buffers[int(tensor.buffer)]
    raw = (
        data[int(buffer.offset) : int(buffer.offset) + int(buffer.size)]
        if is_external(buffer)
        else np.asarray(buffer.data, np.uint8).tobytes()
    )
    return np.frombuffer(raw, dtype)


def tensor_bytes(tensor) -> int:
    """Bytes of the tensor's value at its stored shape (a dynamic dim, -1 in shapeSignature, counts
    at the size it was written with); 0 for a type numpy has no width for (string, resource)."""
    shape = [] if tensor.shape is None else [int(d) for d in tensor.shape]
    try:
        width = np.dtype(dtype_name(tensor.type)).itemsize
    except TypeError:
        return 0
    return width * int(np.prod(shape, dtype=np.int64))


def tensor_quantization(tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """(scale float64[], zero_point int64[], quantized_dimension); empty arrays for float tensors."""
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return np.zeros(0, np.float64), np.zeros(0, np.int64), 0
    scale = np.asarray(q.scale, np.float64).reshape(-1)
    zero = (
        np.zeros(scale.size, np.int64)
        if q.zeroPoint is None or len(q.zeroPoint) == 0
        else np.asarray(q.zeroPoint, np.int64).reshape(-1)
    )
    return scale, zero[: scale.size], int(q.quantizedDimension or 0)
