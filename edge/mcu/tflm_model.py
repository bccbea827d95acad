"""A .tflite the way TFLite-Micro sees it: ops used, I/O quantization, buffers kept inline.

TFLite-Micro reads every constant from inside the flatbuffer. ai-edge-quantizer stores large
buffers after it (`buffer.offset/size`) and TFLM then reads zeros without an error, so
`external_buffers` finds them and `inline_buffers` moves them back inside. Reading goes
through `tflite_file`, the one .tflite reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpuedge.edge.flatbuffer import tflite_file

__all__ = ["OpUse", "ops_used", "external_buffers", "inline_buffers", "io_quantization"]


@dataclass(frozen=True)
class OpUse:
    """A builtin op the model uses: its TFLite name, highest version seen and node count."""

    name: str
    version: int
    count: int


def ops_used(tflite: bytes) -> list[OpUse]:
    """Every operator code the model's subgraphs use (custom ops as "CUSTOM:<name>"), by name."""
    model = tflite_file.read_model(tflite)
    names = tflite_file.operator_names(model)
    versions = [int(code.version) for code in model.operatorCodes or []]
    counts: dict[str, list[int]] = {}
    for subgraph in model.subgraphs:
        for op in subgraph.operators or []:
            entry = counts.setdefault(names[op.opcodeIndex], [0, 0])
            entry[0] = max(entry[0], versions[op.opcodeIndex])
            entry[1] += 1
    return [OpUse(n, v, c) for n, (v, c) in sorted(counts.items())]


def external_buffers(tflite: bytes) -> list[int]:
    """Indices of buffers stored outside the flatbuffer (offset > 1), which TFLM reads as zeros."""
    model = tflite_file.read_model(tflite)
    return [i for i, buf in enumerate(model.buffers or []) if tflite_file.is_external(buf)]


def inline_buffers(tflite: bytes) -> bytes:
    """The same model with every buffer stored inside the flatbuffer (no-op when already so)."""
    model = tflite_file.read_model(tflite)
    if not any(tflite_file.is_external(buf) for buf in model.buffers or []):
        return tflite
    for buf in model.buffers:
        if tflite_file.is_external(buf):
            buf.data = np.frombuffer(tflite, np.uint8, count=buf.size, offset=buf.offset).copy()
            buf.offset, buf.size = 0, 0
    return tflite_file.write_model(model)


def io_quantization(tflite: bytes) -> dict[str, list[dict]]:
    """{"inputs": [...], "outputs": [...]}: name, dtype, shape, scale, zero_point per I/O tensor."""
    model = tflite_file.read_model(tflite)
    subgraph = model.subgraphs[0]

    def describe(index: int) -> dict:
        t = subgraph.tensors[index]
        scale, zero, _ = tflite_file.tensor_quantization(t)
        return {
            "name": tflite_file.text(t.name),
            "dtype": tflite_file.dtype_name(t.type),
            "shape": [int(d) for d in np.asarray([] if t.shape is None else t.shape).reshape(-1)],
            "scale": float(scale[0]) if scale.size else None,
            "zero_point": int(zero[0]) if scale.size else None,
        }

    return {
        "inputs": [describe(int(i)) for i in subgraph.inputs],
        "outputs": [describe(int(i)) for i in subgraph.outputs],
    }
