"""Reading a .tflite flatbuffer the way TFLite-Micro sees it: ops used, I/O quantization, buffers.

TFLite-Micro reads every constant from inside the flatbuffer. ai-edge-quantizer stores large
buffers after it (`buffer.offset/size`) and TFLM then reads zeros without an error (STACK.md),
so `external_buffers` finds them and `inline_buffers` moves them back inside.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OpUse", "ops_used", "external_buffers", "inline_buffers", "io_quantization"]


@dataclass(frozen=True)
class OpUse:
    """A builtin op the model uses: its TFLite name, highest version seen and node count."""

    name: str
    version: int
    count: int


def _schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

    return schema


def _builtin_names() -> dict[int, str]:
    schema = _schema()
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def ops_used(tflite: bytes) -> list[OpUse]:
    """Every operator code the model's subgraphs use (custom ops as "CUSTOM:<name>"), by name."""
    schema = _schema()
    model = schema.Model.GetRootAsModel(tflite, 0)
    names = _builtin_names()
    codes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        name = names.get(code, f"BUILTIN_{code}")
        if code == schema.BuiltinOperator.CUSTOM:
            name = "CUSTOM:" + (oc.CustomCode() or b"?").decode()
        codes.append((name, oc.Version()))
    counts: dict[str, list[int]] = {}
    for g in range(model.SubgraphsLength()):
        sg = model.Subgraphs(g)
        for o in range(sg.OperatorsLength()):
            name, version = codes[sg.Operators(o).OpcodeIndex()]
            entry = counts.setdefault(name, [0, 0])
            entry[0] = max(entry[0], version)
            entry[1] += 1
    return [OpUse(n, v, c) for n, (v, c) in sorted(counts.items())]


def external_buffers(tflite: bytes) -> list[int]:
    """Indices of buffers stored outside the flatbuffer (offset > 1), which TFLM reads as zeros."""
    model = _schema().Model.GetRootAsModel(tflite, 0)
    return [i for i in range(model.BuffersLength()) if model.Buffers(i).Offset() > 1]


def inline_buffers(tflite: bytes) -> bytes:
    """The same model with every buffer stored inside the flatbuffer (no-op when already so)."""
    if not external_buffers(tflite):
        return tflite
    import flatbuffers
    import numpy as np

    schema = _schema()
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    for buf in model.buffers:
        if buf.offset and buf.offset > 1:
            buf.data = np.frombuffer(tflite, np.uint8, count=buf.size, offset=buf.offset).copy()
            buf.offset, buf.size = 0, 0
    builder = flatbuffers.Builder(len(tflite) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def io_quantization(tflite: bytes) -> dict[str, list[dict]]:
    """{"inputs": [...], "outputs": [...]}: name, dtype, shape, scale, zero_point per I/O tensor."""
    import numpy as np

    schema = _schema()
    types = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    model = schema.Model.GetRootAsModel(tflite, 0)
    sg = model.Subgraphs(0)

    def describe(index: int) -> dict:
        t = sg.Tensors(index)
        q = t.Quantization()
        scale = float(q.ScaleAsNumpy()[0]) if q is not None and q.ScaleLength() else None
        zero = int(q.ZeroPointAsNumpy()[0]) if q is not None and q.ZeroPointLength() else None
        return {
            "name": t.Name().decode(),
            "dtype": {"float32": "float32"}.get(types[t.Type()], types[t.Type()]),
            "shape": [int(d) for d in np.asarray(t.ShapeAsNumpy()).reshape(-1)],
            "scale": scale,
            "zero_point": zero,
        }

    return {
        "inputs": [describe(sg.Inputs(i)) for i in range(sg.InputsLength())],
        "outputs": [describe(sg.Outputs(i)) for i in range(sg.OutputsLength())],
    }
