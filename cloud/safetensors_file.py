"""The weights file of a cloud-tpu artifact: a safetensors reader and a deterministic writer.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape, byte
offsets), then the raw little-endian data. The writer sorts names and writes no timestamps, so
the same weights give the same bytes; the `safetensors` package reads what it writes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import InternalError

__all__ = ["write_safetensors", "read_safetensors"]

_ST_DTYPES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "uint32": "U32",
    "bool": "BOOL",
}
_ST_NUMPY = {v: k for k, v in _ST_DTYPES.items()}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    header: dict[str, Any] = {}
    offset, blobs = 0, []
    for name in sorted(tensors):
        array = np.asarray(tensors[name], order="C")  # (ascontiguousarray would make a 0-d tensor 1-d)
        kind = _ST_DTYPES.get(array.dtype.name)
        if kind is None:
            raise InternalError(f"weight {name!r} has dtype {array.dtype}, which the weights file can't hold")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # the reference writer pads the header to 8 bytes
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    body = memoryview(raw)[8 + size :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype_name = _ST_NUMPY[entry["dtype"]]
        if dtype_name == "bfloat16":
            import ml_dtypes

            dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            dtype = np.dtype(dtype_name).newbyteorder("<")
        start, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(entry["shape"])
    return tensors
