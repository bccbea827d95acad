"""edge/data/tflm_ops.json against the real `tflite_micro` interpreter, with single-op models.

Each model is built directly as a flatbuffer (one op, int8 tensors), so the check does not
depend on any converter: an op the data lists must resolve in TFLM, an op it lists as missing
must be refused with "Didn't find op", and ops marked int8 must run on int8 tensors.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpuedge.edge.tflm_ops import aten_to_tflm, tflm_data, tflm_missing, tflm_ops
from tpuedge.edge.tflm_runtime import TflmError, TflmRunner


def _schema():
    from tpuedge.edge.tflite_file import schema  # the one binding tpuedge reads and writes with

    return schema


def single_op_model(
    op: str, n_inputs: int = 1, shape=(1, 4), version: int = 1, out_type: str = "INT8", then: str | None = None,
    out_quant: tuple[float, int] = (0.05, 0),
) -> bytes:
    """A model with one `op` over int8 tensors (scale 0.05, zero point 0) and no options.

    `then`: a second op on the same tensors; TFLM resolves every op before it initializes any
    kernel, so with then="GELU" the load stops at GELU if and only if `op` resolved.
    """
    s = _schema()

    def opcode(name):
        code = s.OperatorCodeT()
        value = getattr(s.BuiltinOperator, name)
        code.builtinCode, code.deprecatedBuiltinCode, code.version = value, min(value, 127), version
        return code

    def tensor(name, ttype="INT8", quant=(0.05, 0)):
        t = s.TensorT()
        t.shape, t.type, t.buffer, t.name = list(shape), getattr(s.TensorType, ttype), 0, name
        q = s.QuantizationParametersT()
        q.scale, q.zeroPoint = [quant[0]], [quant[1]]
        t.quantization = q if ttype == "INT8" else None
        return t

    graph = s.SubGraphT()
    graph.tensors = [tensor(f"in{i}") for i in range(n_inputs)] + [tensor("out", out_type, out_quant)]
    graph.inputs, graph.outputs = list(range(n_inputs)), [n_inputs]
    names = [op] + ([then] if then else [])
    graph.operators = []
    for index in range(len(names)):
        operator = s.OperatorT()
        operator.opcodeIndex, operator.inputs, operator.outputs = index, list(range(n_inputs)), [n_inputs]
        if names[index] == "VAR_HANDLE":  # the Python wrapper reads its shared name before loading
            operator.builtinOptionsType = s.BuiltinOptions.VarHandleOptions
            operator.builtinOptions = s.VarHandleOptionsT()
            operator.builtinOptions.sharedName = "v"
        graph.operators.append(operator)
    model = s.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, [opcode(n) for n in names], [graph]
    model.buffers = [s.BufferT()]
    from tpuedge.edge.tflite_file import write_model

    return write_model(model)


def _load_error(data: bytes) -> str:
    try:
        TflmRunner(data, 16 * 1024)
        return ""
    except TflmError as exc:
        return exc.log + str(exc)


def test_every_listed_op_resolves_in_tflm():
    """Each listed op resolves (the load then stops at the GELU placed after it, before any kernel runs)."""
    unresolved = []
    for op in sorted(tflm_ops()):
        error = _load_error(single_op_model(op, then="GELU"))
        if "builtin opcode 'GELU'" not in error or f"builtin opcode '{op}'" in error:
            unresolved.append(op)
    assert unresolved == []


@pytest.mark.parametrize("op", sorted(tflm_missing()))
def test_missing_op_is_refused_by_tflm(op):
    assert f"Didn't find op for builtin opcode '{op}'" in _load_error(single_op_model(op))


UNARY = ["ABS", "LOGISTIC", "TANH", "RELU", "RELU6", "HARD_SWISH", "LEAKY_RELU", "RSQRT", "QUANTIZE"]  # SOFTMAX needs its options: run by the transformer build
# int8 kernels that require a fixed output quantization (as the converter emits it)
_OUT_QUANT = {"LOGISTIC": (1 / 256, -128)}
BINARY = ["ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"]


@pytest.mark.parametrize("op, n", [(o, 1) for o in UNARY] + [(o, 2) for o in BINARY])
def test_int8_kernels_run(op, n):
    assert tflm_ops()[op].get("int8") is True
    runner = TflmRunner(single_op_model(op, n_inputs=n, out_quant=_OUT_QUANT.get(op, (0.05, 0))), 16 * 1024)
    values = [3, 17, 40, 60] if op == "RSQRT" else [-40, -3, 5, 60]  # rsqrt is defined for x > 0 only
    x = [np.array([values], np.int8) for _ in range(n)]
    y = runner.run_raw(x)[0]
    assert y.dtype == np.int8 and y.shape == (1, 4)
    if op in ("RELU", "ADD", "NEG", "MAXIMUM"):  # same scale in and out: exact integer results
        expected = {"RELU": np.maximum(x[0], 0), "ADD": np.clip(2 * x[0].astype(int), -128, 127),
                    "NEG": -x[0], "MAXIMUM": x[0]}[op]
        np.testing.assert_array_equal(y, expected)


def test_ops_without_int8_kernel_are_marked_so():
    """NEG has no int8 kernel in TFLM: the data must not claim one."""
    assert "int8" not in tflm_ops()["NEG"]
    with pytest.raises(TflmError, match="not supported"):
        TflmRunner(single_op_model("NEG"), 16 * 1024).run_raw([np.array([[-40, -3, 5, 60]], np.int8)])


def test_op_versions_are_not_gated_by_tflm():
    """The data's version policy: TFLM resolves by builtin code, any version runs."""
    assert tflm_data()["versions_accepted"] == "all"
    x = [np.array([[-40, -3, 5, 60]], np.int8)]
    for version in (1, 3, 99):
        y = TflmRunner(single_op_model("RELU", version=version), 16 * 1024).run_raw(x)[0]
        np.testing.assert_array_equal(y, np.maximum(x[0], 0))


def test_resolver_names_and_aten_map_are_consistent():
    s = _schema()
    builtins = {k for k in vars(s.BuiltinOperator) if not k.startswith("_")}
    assert set(tflm_ops()) <= builtins and set(tflm_missing()) <= builtins
    assert not set(tflm_ops()) & set(tflm_missing())
    for entry in tflm_ops().values():
        assert entry["resolver"].startswith("Add") and entry["resolver"].isidentifier()
    for key, lowered in aten_to_tflm().items():
        assert key.startswith("aten."), key
        assert set(lowered) <= set(tflm_ops()) | set(tflm_missing()), key
