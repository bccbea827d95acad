"""edge/mcu/data/tflm_ops.json against the real `tflite_micro` interpreter, with single-op models.

Each model is built directly as a flatbuffer (one op, int8 tensors), so the check does not
depend on any converter: an op the data lists must resolve in TFLM, an op it lists as missing
must be refused with "Didn't find op", and ops marked int8 must run on int8 tensors.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpuedge.edge.mcu.tflm_ops import aten_to_tflm, tflm_data, tflm_missing, tflm_ops
from tflm_single_op import _schema, single_op_model
from tpuedge.edge.mcu.tflm_runtime import TflmError, TflmRunner


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


_SCALE = 0.05  # single_op_model's input scale (zero point 0)
# float64 numpy reference of each op on the dequantized inputs
REFERENCE = {
    "ABS": np.abs,
    "LOGISTIC": lambda x: 1 / (1 + np.exp(-x)),
    "TANH": np.tanh,
    "RELU": lambda x: np.maximum(x, 0),
    "RELU6": lambda x: np.clip(x, 0, 6),
    "HARD_SWISH": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "LEAKY_RELU": lambda x: np.maximum(x, 0),  # no options in the model: alpha 0
    "RSQRT": lambda x: 1 / np.sqrt(x),
    "QUANTIZE": lambda x: x,
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
    "SQUARED_DIFFERENCE": lambda a, b: (a - b) ** 2,
}
BINARY = ["ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"]
# int8 kernels that require a fixed output quantization (as the converter emits it)
_OUT_QUANT = {"LOGISTIC": (1 / 256, -128), "TANH": (1 / 128, 0)}
# TFLM rescales in fixed point, the reference in float64: they may round an exact half apart.
# Measured: 0 LSB on every op below; the bound states the rounding allowance.
_TOLERANCE_LSB = 1


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_int8_kernels_match_a_float_reference(op):
    """SOFTMAX needs its options: it runs in the transformer build (tests/test_mcu_rewrite_and_errors.py)."""
    assert tflm_ops()[op].get("int8") is True
    n = 2 if op in BINARY else 1
    out_scale, out_zero = _OUT_QUANT.get(op, (_SCALE, 0))
    runner = TflmRunner(single_op_model(op, n_inputs=n, out_quant=(out_scale, out_zero)), 16 * 1024)
    rng = np.random.default_rng(0)
    low = 1 if op == "RSQRT" else -128  # rsqrt is defined for x > 0 only
    worst = 0
    for _ in range(32):
        x = [rng.integers(low, 128, (1, 4)).astype(np.int8) for _ in range(n)]
        y = runner.run_raw(x)[0]
        assert y.dtype == np.int8 and y.shape == (1, 4)
        reference = REFERENCE[op](*[xi.astype(np.float64) * _SCALE for xi in x])
        expected = np.clip(np.round(reference / out_scale) + out_zero, -128, 127)
        worst = max(worst, int(np.abs(y.astype(np.int64) - expected).max()))
    assert worst <= _TOLERANCE_LSB, f"{op}: {worst} LSB from the float reference"


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


def test_quantizer_int8_list_is_ai_edge_quantizers_own():
    """The data's quantizer_int8 is the static int8 op list of the installed ai-edge-quantizer."""
    import json

    from ai_edge_quantizer import default_policy

    from ai_edge_quantizer import qtyping
    from ai_edge_quantizer.utils.tfl_flatbuffer_utils import TFL_OP_NAME_TO_CODE

    policy = json.loads(default_policy.DEFAULT_JSON_POLICY)["ops_per_config"]["static_wi8_ai8"]
    names = {code: name for name, code in vars(_schema().BuiltinOperator).items() if not name.startswith("_")}
    # the quantizer's own op names, as builtins: its CONV_2D_TRANSPOSE is TRANSPOSE_CONV (the name
    # match alone left transposed convolutions out, and mcu refused them)
    builtins = {
        names[TFL_OP_NAME_TO_CODE[qtyping.TFLOperationName(op)]]
        for op in policy
        if op in qtyping.TFLOperationName.__members__ and qtyping.TFLOperationName(op) in TFL_OP_NAME_TO_CODE
    }
    assert sorted(tflm_data()["quantizer_int8"]) == sorted(builtins)


_COMPARISONS = {
    "EQUAL": np.equal,
    "NOT_EQUAL": np.not_equal,
    "LESS": np.less,
    "LESS_EQUAL": np.less_equal,
    "GREATER": np.greater,
    "GREATER_EQUAL": np.greater_equal,
}


@pytest.mark.parametrize("op", sorted(_COMPARISONS))
def test_int8_comparisons_run_in_tflm(op):
    """TFLite-Micro's comparison kernels take int8 tensors (bool out): the data says so. Whether an
    mcu model may use one is the quantizer's part of the rule (it leaves LESS, GREATER, ... float)."""
    assert tflm_ops()[op].get("int8") is True
    runner = TflmRunner(single_op_model(op, n_inputs=2, out_type="BOOL"), 16 * 1024)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, (1, 4)).astype(np.int8) for _ in range(2))
    b[0, 0] = a[0, 0]  # a tie: the strict and the non-strict ones differ there
    np.testing.assert_array_equal(runner.run_raw([a, b])[0], _COMPARISONS[op](a, b))
