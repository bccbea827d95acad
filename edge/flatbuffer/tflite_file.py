"""The one reader (and writer) of .tflite flatbuffers, on the schema binding ai-edge-litert ships.

Every part of tpuedge that looks inside a .tflite goes through `read_model`: it checks the bytes
before decoding them, so a truncated, random or empty file is a `UserError` naming the file and
what is wrong, never a `struct.error` from deep inside the flatbuffers runtime. Python's
flatbuffers package has no Verifier, so the check is structural: the "TFL3" file identifier,
every offset and vector inside the file (a full decode of the object tree), every tensor,
buffer and opcode index in range, and buffers stored after the flatbuffer (`buffer.offset/size`,
which ai-edge-quantizer writes for large models) inside the file.

`DTYPE_NAMES` is the one TensorType -> numpy-name table; `operator_names` gives each opcode its
builtin name ("CONV_2D") or "CUSTOM:<name>".
"""

from __future__ import annotations

import struct
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np

# ai-edge-litert is a direct dependency, and its binding is the one the converter stack
# (litert-torch, ai-edge-quantizer) reads and writes with. About 0.1 s to import.
from ai_edge_litert import schema_py_generated as schema

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
    "renamed_tensors",
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
    where = str(source) if source is not None else "the .tflite bytes"
    data = bytes(data)
    if len(data) == 0:
        raise _fail(where, "it is empty (0 bytes)")
    if len(data) < 8:
        raise _fail(where, f"it is only {len(data)} bytes long")
    if data[4:8] != FILE_IDENTIFIER:
        raise _fail(
            where,
            f"it lacks the TFLite file identifier {FILE_IDENTIFIER.decode()!r} at bytes 4-8 (found {data[4:8]!r})",
        )
    (root,) = struct.unpack_from("<I", data, 0)
    if root + 4 > len(data):
        raise _fail(where, f"its root table offset {root} lies past the end of its {len(data)} bytes")
    try:
        model = schema.ModelT.InitFromPackedBuf(data, 0)
    except _DECODE_ERRORS:
        raise _fail(where, f"an offset or length inside it points outside its {len(data)} bytes") from None
    _check_indices(model, len(data), where)
    return model


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


def _packed_size_hint(model) -> int:
    """At least what `model` packs to, nearly always: its buffers' bytes, plus room for every
    tensor, operator and name (short names: well under 2 KiB each)."""
    data = sum(np.asarray(b.data).nbytes for b in model.buffers or [] if b.data is not None)
    objects = sum(len(sg.tensors or []) + len(sg.operators or []) for sg in model.subgraphs or [])
    return data + 2048 * (objects + len(model.buffers or [])) + (1 << 20)


class _ModelBuilder(flatbuffers.Builder):
    """A flatbuffers builder whose numpy vectors (a model's weights) are copied in once, and
    whose equal numeric vectors and equal strings are written once.

    The runtime's CreateNumpyVector copies each array three times: `byteswap` (a full copy even
    for bytes, whose dtype string starts with "|", not "<"), `tobytes`, then into the builder;
    a third of the time a 90 MB model took to write. Here a C-contiguous array that needs no
    swap (bytes, or little-endian) goes straight into the builder.

    A vector of numbers other than bytes (shapes, op inputs, quantization scales and zero
    points) or a string (a tensor name) equal to one written before is not written again: the
    tables refer to the first copy, as flatbuffers allows (readers follow offsets). A per-channel
    int8 weight carries an int64 zero point per output channel, all 0: one vector per channel
    count instead of one per tensor, 8 bytes a channel (ShuffleNetV2-x0.5's int8 file: 9,811
    channel entries). Byte vectors (buffers' data) are written as they come."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._written: dict[tuple[str, bytes], int] = {}  # (dtype, bytes) -> offset of the vector
        self._strings: dict[bytes, int] = {}

    def CreateString(self, s, encoding="utf-8", errors="strict"):  # noqa: N802 - the runtime's name
        key = s.encode(encoding, errors) if isinstance(s, str) else bytes(s)
        if key not in self._strings:
            self._strings[key] = super().CreateString(key)
        return self._strings[key]

    def CreateNumpyVector(self, x):  # noqa: N802 - the runtime's name
        if not (isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype.kind in "iuf" and x.dtype.itemsize > 1):
            return self._create_numpy_vector(x)
        key = (x.dtype.str, x.tobytes())
        if key not in self._written:
            self._written[key] = self._create_numpy_vector(x)
        return self._written[key]

    def _create_numpy_vector(self, x):
        swap_free = isinstance(x, np.ndarray) and (x.dtype.itemsize == 1 or x.dtype.str[0] == "<")
        if not (swap_free and x.ndim == 1 and x.dtype.kind in "biuf" and x.flags.c_contiguous):
            return super().CreateNumpyVector(x)
        self.StartVector(x.itemsize, x.size, x.dtype.alignment)
        self.head -= x.nbytes
        self.Bytes[self.head : self.head + x.nbytes] = memoryview(x).cast("B")
        self.vectorNumElems = x.size
        return self.EndVector()


class _PackedOnce:
    """Stands in for a table while a model is packed: the first Pack writes it, the others refer
    to that copy."""

    __slots__ = ("table", "offset")

    def __init__(self, table):
        self.table, self.offset = table, None

    def Pack(self, builder):  # noqa: N802 - the object API's name
        if self.offset is None:
            self.offset = self.table.Pack(builder)
        return self.offset


def _frozen(value) -> Any:
    """A hashable image of an object-API value (a table's fields, recursively)."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if hasattr(value, "__dict__"):
        return (type(value).__name__, tuple((k, _frozen(v)) for k, v in sorted(vars(value).items())))
    return value


@contextmanager
def _equal_tables_shared(model):
    """Equal quantization tables (every tensor has one; a slice's or a reshape's output has its
    input's) and equal operator options (an unrolled LSTM's thousands of MulOptions) written once:
    each would otherwise be its own table. The model's objects are as they were afterwards."""
    swapped, shared = [], {}

    def share(owner, attr: str) -> None:
        table = getattr(owner, attr)
        if table is not None:
            swapped.append((owner, attr, table))
            setattr(owner, attr, shared.setdefault(_frozen(table), _PackedOnce(table)))

    try:
        for graph in model.subgraphs or []:
            for tensor in graph.tensors or []:
                share(tensor, "quantization")
            for op in graph.operators or []:
                share(op, "builtinOptions")
                share(op, "builtinOptions2")
        yield
    finally:
        for owner, attr, table in swapped:
            setattr(owner, attr, table)


def _pack(model) -> bytes:
    """The flatbuffer of `model`. The builder starts at the model's size (grown by doubling from
    1 KiB, a 434 MB float BERT-base passed through 256 + 512 MB at once; the bytes do not depend
    on the starting size, it writes from the end) and is copied out once (`bytes(builder.Output())`
    copied twice: 1.4 GB at once for that BERT-base, its build's peak)."""
    builder = _ModelBuilder(min(_packed_size_hint(model), flatbuffers.Builder.MAX_BUFFER_SIZE))
    with _equal_tables_shared(model):
        builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(memoryview(builder.Bytes)[builder.Head() :])


def write_model(model, external_from: bytes | None = None) -> bytes:
    """Serialize a `ModelT` (with the "TFL3" identifier).

    `external_from`: the bytes `model` was read from. Its buffers stored after the flatbuffer
    (offset/size, as ai-edge-quantizer writes large models) are then stored after the new one,
    16-byte aligned, with their offsets moved; without it, offsets are written as they are.
    """
    external = [b for b in model.buffers or [] if is_external(b)] if external_from is not None else []
    if not external:
        return _pack(model)
    payloads = [bytes(external_from[int(b.offset) : int(b.offset) + int(b.size)]) for b in external]
    for b in external:  # placeholders as wide as any real offset, so the second pack has this length
        b.offset = 1 << 40
    head = _pack(model)
    position, layout = len(head), []
    for b, payload in zip(external, payloads):
        position = -(-position // 16) * 16
        b.offset = position
        layout.append((position, payload))
        position += len(payload)
    head = _pack(model)
    out = bytearray(head)
    for start, payload in layout:
        out += bytes(start - len(out)) + payload
    return bytes(out)


def compact_model(data: bytes) -> bytes:
    """The model in `data` written again by `write_model`: the same model, its equal vectors
    written once (`_ModelBuilder`); litert-torch's and ai-edge-quantizer's writers give every
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


def tensor_names(data: bytes) -> list[list[str]]:
    """Each subgraph's tensor names, read in place (no object tree, no weight copies). For bytes
    this package wrote or checked; `read_model` is the checked reader."""
    model = schema.Model.GetRootAs(data, 0)
    graphs = [model.Subgraphs(i) for i in range(model.SubgraphsLength())]
    return [[text(g.Tensors(j).Name()) for j in range(g.TensorsLength())] for g in graphs]


def renamed_tensors(data: bytes, names: list[str]) -> bytes | None:
    """`data` with its tensors renamed (`names`: one per tensor, across subgraphs, in
    `tensor_names`' order), every other byte where it was: no object tree, no repack, one copy of
    the file (the repack peaked 77 MB above the lowering itself for DistilBERT's 44 MB). A new
    name no longer than the old one is written over it (length prefix, name, zeros up to the old
    terminator); a longer one, or one whose string another tensor shares, is appended after the
    file's last byte (4-byte aligned, as strings are) and the tensor's offset moved to it:
    flatbuffer offsets point forward, and buffers stored after the flatbuffer keep their absolute
    offsets. None if a tensor to rename has no name field (`write_model` can add one). For
    bytes this package wrote or checked."""
    model = schema.Model.GetRootAs(data, 0)
    fields = []  # (position of the tensor's offset to its name, the string's position, its length)
    for i in range(model.SubgraphsLength()):
        graph = model.Subgraphs(i)
        for j in range(graph.TensorsLength()):
            table = graph.Tensors(j)._tab
            slot = table.Offset(_TENSOR_NAME_SLOT)
            field = table.Pos + slot if slot else 0
            string = field + _U32.unpack_from(data, field)[0] if slot else 0
            fields.append((field, string, _U32.unpack_from(data, string)[0] if slot else 0))
    if len(fields) != len(names):
        raise ValueError(f"{len(names)} names for {len(fields)} tensors")
    uses = Counter(string for _, string, _ in fields)
    patches, appended, end = [], [], len(data)
    for (field, string, length), name in zip(fields, names):
        encoded = name.encode()
        if bytes(data[string + 4 : string + 4 + length]) == encoded if field else not encoded:
            continue
        if not field:
            return None
        if uses[string] == 1 and len(encoded) <= length:
            patches.append((string, _U32.pack(len(encoded)) + encoded + bytes(length - len(encoded) + 1)))
            continue
        end = -(-end // 4) * 4
        appended.append((end, _U32.pack(len(encoded)) + encoded + b"\0"))
        patches.append((field, _U32.pack(end - field)))
        end += len(appended[-1][1])
    view, chunks, at = memoryview(data), [], 0
    for position, patch in sorted(patches):
        chunks += [view[at:position], patch]
        at = position + len(patch)
    chunks.append(view[at:])
    at = len(data)
    for position, string in appended:
        chunks += [bytes(position - at), string]
        at = position + len(string)
    return b"".join(chunks)


def op_scales(data: bytes, builtins: frozenset[str]) -> list[tuple[int, str, str, list, list]]:
    """(op index, builtin, output dtype, input scales, output scales) of each op of the first
    subgraph named in `builtins`; a scale is None for a tensor without one (or no tensor). Read
    in place, without unpacking the model (`read_model` copies every weight: 0.3 s on MiniLM)."""
    model = schema.Model.GetRootAs(data, 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    names = [_BUILTIN_NAMES.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "") for c in codes]
    graph = model.Subgraphs(0)

    def scale(index: int):
        if index < 0:
            return None
        q = graph.Tensors(index).Quantization()
        return float(q.Scale(0)) if q is not None and q.ScaleLength() else None

    found = []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        name = names[op.OpcodeIndex()]
        if name in builtins:
            outputs = [int(op.Outputs(k)) for k in range(op.OutputsLength())]
            found.append(
                (
                    i,
                    name,
                    dtype_name(graph.Tensors(outputs[0]).Type()) if outputs else "",
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
