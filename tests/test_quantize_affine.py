"""The one quantize/dequantize pair (tpuedge.quantize.affine) against the runtimes' own QUANTIZE and
DEQUANTIZE kernels, per-tensor and per-channel, and the runners that use it."""

from __future__ import annotations

import numpy as np
import pytest

from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.flatbuffer.tflite_file import schema
from tpuedge.quantize.affine import dequantize, quantize

SCALE, ZERO = 0.1, -3
# exact ties after a float32 division (0.05/0.1 = 0.5, 0.25/0.1 = 2.5, 0.35/0.1 = 3.5 in float32,
# though 3.4999... in float64), saturation, zero, and a value just under a tie
X = np.array(
    [0.05, 0.15, -0.05, -0.15, 0.25, -0.25, 0.35, 1000.0, -1000.0, 0.0, 12.5, -12.5, 0.049999997, 0.3], np.float32
)


def _one_op_model(op: int, in_type: int, out_type: int, shape, in_q=None, out_q=None) -> bytes:
    """A .tflite holding one op, written with the schema binding (no converter in between)."""

    def tensor(name: str, dtype: int, q, buffer: int):
        t = schema.TensorT()
        t.name, t.type, t.shape, t.buffer = name.encode(), dtype, list(shape), buffer
        if q is not None:
            t.quantization = schema.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint, t.quantization.quantizedDimension = (
                list(q[0]),
                list(q[1]),
                q[2],
            )
        return t

    model = schema.ModelT()
    model.version = 3
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = op, min(op, 127), 1
    model.operatorCodes = [code]
    graph = schema.SubGraphT()
    graph.tensors = [tensor("x", in_type, in_q, 1), tensor("y", out_type, out_q, 2)]
    graph.inputs, graph.outputs = [0], [1]
    operator = schema.OperatorT()
    operator.opcodeIndex, operator.inputs, operator.outputs = 0, [0], [1]
    graph.operators = [operator]
    model.subgraphs = [graph]
    model.buffers = [schema.BufferT() for _ in range(3)]
    return tflite_file.write_model(model)


def _litert(model: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def _tflm(model: bytes, x: np.ndarray) -> np.ndarray:
    from tflite_micro import runtime

    it = runtime.Interpreter.from_bytes(model, arena_size=16384)
    it.set_input(x, 0)
    it.invoke()
    return np.array(it.get_output(0))


QUANTIZE_INT8 = dict(
    op=schema.BuiltinOperator.QUANTIZE, in_type=schema.TensorType.FLOAT32, out_type=schema.TensorType.INT8
)


def test_quantize_rounds_as_each_runtimes_kernel():
    model = _one_op_model(**QUANTIZE_INT8, shape=X.shape, out_q=([SCALE], [ZERO], 0))
    tflm, litert = _tflm(model, X), _litert(model, X)
    assert np.array_equal(quantize(X, SCALE, ZERO, np.int8, ties="away"), tflm)
    assert np.array_equal(quantize(X, SCALE, ZERO, np.int8, ties="even"), litert)
    assert not np.array_equal(tflm, litert)  # the runtimes really differ on ties: the choice matters
    assert quantize(X, SCALE, ZERO, np.int8)[7:9].tolist() == [127, -128]


def test_int16_and_uint8_saturate_at_their_own_bounds():
    x = np.array([-1e6, -0.5, 0.0, 0.5, 1e6], np.float32)
    assert quantize(x, 0.5, 0, np.int16).tolist() == [-32768, -1, 0, 1, 32767]
    assert quantize(x, 0.5, 128, np.uint8).tolist() == [0, 127, 128, 129, 255]


@pytest.mark.parametrize("axis", [0, 1])
def test_per_channel_dequantize_matches_litert_dequantize(axis):
    q = (np.arange(12, dtype=np.int64).reshape(3, 4) * 23 % 256 - 128).astype(np.int8)
    channels = q.shape[axis]
    scales, zeros = [0.5, 0.25, 0.125, 0.0625][:channels], [0, 1, -2, 5][:channels]
    model = _one_op_model(
        schema.BuiltinOperator.DEQUANTIZE,
        schema.TensorType.INT8,
        schema.TensorType.FLOAT32,
        q.shape,
        in_q=(scales, zeros, axis),
    )
    got = dequantize(q, scales, zeros, axis=axis)
    assert got.dtype == np.float32
    assert np.array_equal(got, _litert(model, q))
    shape = [1, 1]
    shape[axis] = channels
    by_hand = (q.astype(np.float64) - np.reshape(zeros, shape)) * np.reshape(scales, shape)
    assert np.array_equal(got, by_hand.astype(np.float32))


def test_per_channel_quantize_is_per_tensor_quantize_per_slice():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    scales, zeros = np.array([0.02, 0.03, 0.05]), np.array([0, -4, 7])
    q = quantize(x, scales, zeros, np.int8, axis=1)
    for c in range(3):
        assert np.array_equal(q[:, c], quantize(x[:, c], scales[c], zeros[c], np.int8))
    back = dequantize(q, scales, zeros, axis=1)
    half_step = np.broadcast_to(scales[None, :, None] / 2, x.shape)
    inside = np.abs(x) < 200 * half_step  # |x / scale| < 100: not saturated
    assert inside.mean() > 0.9 and np.all(np.abs(back - x)[inside] <= half_step[inside] + 1e-7)
    with pytest.raises(ValueError, match="need the axis"):
        quantize(x, scales, zeros, np.int8)


def test_runners_feed_int8_inputs_as_their_runtime_quantizes():
    """LiteRTRunner/TflmRunner.run on an int8-input model give what the runtime's own QUANTIZE
    op would have fed it (dequantized by the model's DEQUANTIZE)."""
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    int8_input = _one_op_model(
        schema.BuiltinOperator.DEQUANTIZE,
        schema.TensorType.INT8,
        schema.TensorType.FLOAT32,
        X.shape,
        in_q=([SCALE], [ZERO], 0),
    )
    quantize_op = _one_op_model(**QUANTIZE_INT8, shape=X.shape, out_q=([SCALE], [ZERO], 0))
    expected_litert = (_litert(quantize_op, X).astype(np.float64) - ZERO) * SCALE
    expected_tflm = (_tflm(quantize_op, X).astype(np.float64) - ZERO) * SCALE
    assert np.array_equal(LiteRTRunner(int8_input).run([X])[0], expected_litert.astype(np.float32))
    assert np.array_equal(TflmRunner(int8_input, 16384).run([X])[0], expected_tflm.astype(np.float32))
