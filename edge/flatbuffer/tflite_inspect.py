"""Read a .tflite flatbuffer: I/O tensors with quantization, op histogram, size breakdown.

Reads the file itself (through `tflite_file`, the one .tflite reader), so it describes exactly
what was written, including buffers stored outside the flatbuffer (offset/size), which some
runtimes (e.g. TFLite-Micro) cannot read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tpuedge.edge.flatbuffer import tflite_file

__all__ = ["TensorInfo", "TFLiteSummary", "summarize_tflite"]

_FLOAT = ("float32", "float16")


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
        q = (
            f" scale={self.scale[0]:.6g} zp={self.zero_point[0]}"
            if len(self.scale) == 1
            else (f" {len(self.scale)} per-channel scales" if self.scale else "")
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


def summarize_tflite(data: bytes, source: str | Path | None = None) -> TFLiteSummary:
    """What `data` holds; a malformed file is a UserError naming `source` (see tflite_file)."""
    model = tflite_file.read_model(data, source)
    op_names = tflite_file.operator_names(model)
    subgraph = model.subgraphs[0]
    tensors = subgraph.tensors or []

    def info(index: int, name: str | None = None) -> TensorInfo:
        t = tensors[index]
        scale, zero, _ = tflite_file.tensor_quantization(t)
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        return TensorInfo(
            name or tflite_file.text(t.name),
            shape,
            tflite_file.dtype_name(t.type),
            tuple(float(s) for s in scale),
            tuple(int(z) for z in zero),
        )

    names_in: dict[int, str] = {}
    names_out: dict[int, str] = {}
    for sig in model.signatureDefs or []:
        for tm in sig.inputs or []:
            names_in[tm.tensorIndex] = tflite_file.text(tm.name)
        for tm in sig.outputs or []:
            names_out[tm.tensorIndex] = tflite_file.text(tm.name)
    inputs = [info(int(i), names_in.get(int(i))) for i in (subgraph.inputs if subgraph.inputs is not None else [])]
    outputs = [info(int(i), names_out.get(int(i))) for i in (subgraph.outputs if subgraph.outputs is not None else [])]

    ops: Counter[str] = Counter()
    float_ops: Counter[str] = Counter()
    for op in subgraph.operators or []:
        name = op_names[op.opcodeIndex]
        ops[name] += 1
        outs = [int(i) for i in (op.outputs if op.outputs is not None else []) if i >= 0]
        if name not in ("QUANTIZE", "DEQUANTIZE") and outs and tflite_file.dtype_name(tensors[outs[0]].type) in _FLOAT:
            float_ops[name] += 1

    buffers = model.buffers or []
    buffer_size = {i: tflite_file.buffer_nbytes(buf) for i, buf in enumerate(buffers)}
    activations: Counter[str] = Counter()
    weights: Counter[str] = Counter()
    for t in tensors:
        dtype = tflite_file.dtype_name(t.type)
        size = buffer_size.get(t.buffer, 0)
        if size:
            weights[dtype] += size
        else:
            activations[dtype] += 1
    weight_bytes = sum(buffer_size.values())
    return TFLiteSummary(
        file_bytes=len(data),
        weight_bytes=weight_bytes,
        graph_bytes=len(data) - weight_bytes,  # external buffers live in the same file, after the flatbuffer
        external_buffers=sum(1 for buf in buffers if tflite_file.is_external(buf)),
        inputs=inputs,
        outputs=outputs,
        op_histogram=dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        activation_dtypes=dict(sorted(activations.items())),
        weight_dtypes=dict(sorted(weights.items())),
        float_ops=dict(sorted(float_ops.items())),
    )
