"""Packing a .tflite object tree (`schema.ModelT`) into flatbuffer bytes: one copy of each weight
into the builder, and equal vectors, strings and tables written once. `tflite_file.write_model`
is the one caller; this is how it writes, kept apart from what it reads.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import flatbuffers
import numpy as np

__all__ = ["ModelBuilder", "PackedOnce", "equal_tables_shared", "frozen_value", "pack", "packed_size_hint"]


def packed_size_hint(model) -> int:
    """At least what `model` packs to, nearly always: its buffers' bytes, plus room for every
    tensor, operator and name (short names: well under 2 KiB each)."""
    data = sum(np.asarray(b.data).nbytes for b in model.buffers or [] if b.data is not None)
    objects = sum(len(sg.tensors or []) + len(sg.operators or []) for sg in model.subgraphs or [])
    return data + 2048 * (objects + len(model.buffers or [])) + (1 << 20)


class ModelBuilder(flatbuffers.Builder):
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


class PackedOnce:
    """Stands in for a table while a model is packed: the first Pack writes it, the others refer
    to that copy."""

    __slots__ = ("table", "offset")

    def __init__(self, table):
        self.table, self.offset = table, None

    def Pack(self, builder):  # noqa: N802 - the object API's name
        if self.offset is None:
            self.offset = self.table.Pack(builder)
        return self.offset


def frozen_value(value) -> Any:
    """A hashable image of an object-API value (a table's fields, recursively)."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(frozen_value(v) for v in value)
    if hasattr(value, "__dict__"):
        return (type(value).__name__, tuple((k, frozen_value(v)) for k, v in sorted(vars(value).items())))
    return value


@contextmanager
def equal_tables_shared(model):
    """Equal quantization tables (every tensor has one; a slice's or a reshape's output has its
    input's) and equal operator options (an unrolled LSTM's thousands of MulOptions) written once:
    each would otherwise be its own table. The model's objects are as they were afterwards."""
    swapped, shared = [], {}

    def share(owner, attr: str) -> None:
        table = getattr(owner, attr)
        if table is not None:
            swapped.append((owner, attr, table))
            setattr(owner, attr, shared.setdefault(frozen_value(table), PackedOnce(table)))

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


def pack(model, file_identifier: bytes) -> bytes:
    """The flatbuffer of `model`. The builder starts at the model's size (grown by doubling from
    1 KiB, a 434 MB float BERT-base passed through 256 + 512 MB at once; the bytes do not depend
    on the starting size, it writes from the end) and is copied out once (`bytes(builder.Output())`
    copied twice: 1.4 GB at once for that BERT-base, its build's peak)."""
    builder = ModelBuilder(min(packed_size_hint(model), flatbuffers.Builder.MAX_BUFFER_SIZE))
    with equal_tables_shared(model):
        builder.Finish(model.Pack(builder), file_identifier=file_identifier)
    return bytes(memoryview(builder.Bytes)[builder.Head() :])
