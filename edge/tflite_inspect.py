"""Read a .tflite flatbuffer: I/O tensors with quantization, op histogram, size breakdown.

Parses the file itself (LiteRT's flatbuffer schema), so it describes exactly what was written,
including buffers stored outside the flatbuffer (offset/size), which some runtimes (e.g.
TFLite-Micro) cannot read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["TensorInfo", "TFLiteSummary", "summarize_tflite"]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy name: float32, int8, int16, ...
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()

    @property
    def quantized(self) -> bool:
        return bool(self.scale)

    def to_json(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["scale"] = [float(s) for s in self.scale]
        d["zero_point"] = [int(z) for z in self.zero_point]
        return d

    def describe(self) -> str:
        q = f" scale={self.scale[0]:.6g} zp={self.zero_point[0]}" if len(self.scale) == 1 else (
            f" {len(self.scale)} per-channel scales" if self.scale else ""
        )
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]{q}"


@dataclass(frozen=True)
class TFLiteSummary:
    file_bytes: int
    weight_bytes: int  # constant tensor data (inline + outside the flatbuffer)
    graph_bytes: int  # everything else: ops, tensors, metadata
    external_buffers: int  # buffers stored outside the flatbuffer (offset/size)
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    op_histogram: dict[str, int]
    activation_dtypes: dict[str, int]  # dtype -> number of non-constant tensors
    weight_dtypes: dict[str, int] = field(default_factory=dict)  # dtype -> bytes of constant data
    float_ops: dict[str, int] = field(default_factory=dict)  # ops computing in float (not (de)quantize)

    def to_json(self) -> dict:
        d = asdict(self)
        d["inputs"] = [t.to_json() for t in self.inputs]
        d["outputs"] = [t.to_json() for t in self.outputs]
        return d


def _names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def summarize_tflite(data: bytes) -> TFLiteSummary:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(bytearray(data), 0))
    type_names = {code: name.lower() for code, name in _names(schema.TensorType).items()}
    type_names.update({0: "float32", 1: "float16", 2: "int32", 4: "int64", 10: "float64"})
    op_names = _names(schema.BuiltinOperator)
    subgraph = model.subgraphs[0]

    def info(index: int, name: str | None = None) -> TensorInfo:
        t = subgraph.tensors[index]
        q = t.quantization
        scale = tuple(float(s) for s in (q.scale if q is not None and q.scale is not None else []))
        zp = tuple(int(z) for z in (q.zeroPoint if q is not None and q.zeroPoint is not None else []))
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        return TensorInfo(name or _text(t.name), shape, type_names.get(t.type, str(t.type)), scale, zp[: len(scale)])

    names_in: dict[int, str] = {}
    names_out: dict[int, str] = {}
    for sig in model.signatureDefs or []:
        for tm in sig.inputs or []:
            names_in[tm.tensorIndex] = _text(tm.name)
        for tm in sig.outputs or []:
            names_out[tm.tensorIndex] = _text(tm.name)
    inputs = [info(int(i), names_in.get(int(i))) for i in subgraph.inputs]
    outputs = [info(int(i), names_out.get(int(i))) for i in subgraph.outputs]

    ops: Counter[str] = Counter()
    float_ops: Counter[str] = Counter()
    for op in subgraph.operators or []:
        code = model.operatorCodes[op.opcodeIndex]
        builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        name = op_names.get(builtin, str(builtin))
        name = f"CUSTOM:{_text(code.customCode)}" if name == "CUSTOM" else name
        ops[name] += 1
        outs = [int(i) for i in (op.outputs if op.outputs is not None else []) if i >= 0]
        if name not in ("QUANTIZE", "DEQUANTIZE") and outs and subgraph.tensors[outs[0]].type in (0, 1):
            float_ops[name] += 1

    weight_bytes, external = 0, 0
    buffer_size: dict[int, int] = {}
    for i, buf in enumerate(model.buffers or []):
        if buf.offset and buf.offset > 1:
            size = int(buf.size)
            external += 1
        else:
            size = 0 if buf.data is None else int(np.asarray(buf.data).nbytes)
        buffer_size[i] = size
        weight_bytes += size
    activations: Counter[str] = Counter()
    weights: Counter[str] = Counter()
    for t in subgraph.tensors:
        dtype = type_names.get(t.type, str(t.type))
        size = buffer_size.get(t.buffer, 0)
        if size:
            weights[dtype] += size
        else:
            activations[dtype] += 1
    return TFLiteSummary(
        file_bytes=len(data),
        weight_bytes=weight_bytes,
        graph_bytes=len(data) - weight_bytes,  # external buffers live in the same file, after the flatbuffer
        external_buffers=external,
        inputs=inputs,
        outputs=outputs,
        op_histogram=dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        activation_dtypes=dict(sorted(activations.items())),
        weight_dtypes=dict(sorted(weights.items())),
        float_ops=dict(sorted(float_ops.items())),
    )
