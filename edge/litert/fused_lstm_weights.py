"""The weights of LiteRT's fused UNIDIRECTIONAL_SEQUENCE_LSTM (edge/litert/sequence_lstm.py makes the op)
in a quantized build, on the flatbuffer alone (no torch: an int8 build asks `has_fused_lstm` of
every model, and importing sequence_lstm registers its torch op, ~30 ms).

ai-edge-quantizer has no recipe for the op and leaves it float; where a recipe stores weights in
int8, the op's weights are stored in int8 too (per output channel) and read through a
DEQUANTIZE, the op computing in float, but those whose int8 costs more than the plan allows,
measured (`plan_fused_lstm_weights`). LiteRT's hybrid kernel (int8 weights per tensor, inputs
quantized at run time) cost Resemblyzer 0.17 cosine with its first layer in it, 0.008 with its
second; per channel with float compute the second costs 0.0008, the first's input weights still
0.15 (they read a mel power spectrogram), so those stay float32.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FusedLSTMWeights", "has_fused_lstm", "plan_fused_lstm_weights", "with_int8_weights"]

# the op's inputs that are weights: input-to-gate (1-4), recurrent-to-gate (5-8), peephole
# (9-11) and projection (16); biases (12-15) stay float32
_WEIGHT_INPUTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16)


def _stores_int8_weights(recipe: list[dict]) -> bool:
    """Whether the recipe's default entry (every op) stores weights as 8-bit integers."""
    default = next((e for e in recipe if e.get("regex") == ".*" and e.get("operation") == "*"), None)
    weights = (default or {}).get("op_config", {}).get("weight_tensor_config") or {}
    return weights.get("num_bits") == 8 and weights.get("dtype") == "INT"


def has_fused_lstm(data: bytes) -> bool:
    """Whether the model in `data` has a fused sequence LSTM (its op codes, read in place)."""
    from tpuedge.edge.flatbuffer import tflite_file

    return "UNIDIRECTIONAL_SEQUENCE_LSTM" in tflite_file.builtin_names(data)


def _fused_weights(model) -> list[tuple[int, int, int]]:
    """(fused op's position among them, its input, tensor index) of every float32 constant weight."""
    from tpuedge.edge.flatbuffer import tflite_file

    schema = tflite_file.schema
    graph, found, names = model.subgraphs[0], [], tflite_file.operator_names(model)
    fused = [op for op in graph.operators or [] if names[op.opcodeIndex] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    for k, op in enumerate(fused):
        for i in _WEIGHT_INPUTS:
            index = int(op.inputs[i]) if i < len(op.inputs) else -1
            if (
                index >= 0
                and graph.tensors[index].type == schema.TensorType.FLOAT32
                and tflite_file.is_constant(model, graph.tensors[index])
            ):
                found.append((k, i, index))
    return found


def with_int8_weights(data: bytes, float32: frozenset = frozenset()) -> bytes:
    """`data` with its fused LSTMs' float32 weights stored in int8 (per output channel, symmetric)
    and read through a DEQUANTIZE: the op computes in float on those values. `float32`: the
    (fused op's position, input) pairs left as they are. `data` itself when nothing changes."""
    import numpy as np

    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.quantize import affine

    schema = tflite_file.schema
    model = tflite_file.read_model(data)
    chosen = [(k, i, t) for k, i, t in _fused_weights(model) if (k, i) not in float32]
    if not chosen:
        return data
    graph = model.subgraphs[0]
    readers: dict[int, int] = {}
    for tensor in graph.tensors:
        readers[tensor.buffer] = readers.get(tensor.buffer, 0) + 1
    code = next(
        (n for n, c in enumerate(model.operatorCodes) if c.builtinCode == schema.BuiltinOperator.DEQUANTIZE), None
    )
    if code is None:
        op_code = schema.OperatorCodeT()
        op_code.builtinCode = op_code.deprecatedBuiltinCode = schema.BuiltinOperator.DEQUANTIZE
        op_code.version = 1
        model.operatorCodes.append(op_code)
        code = len(model.operatorCodes) - 1
    dequantizes = []
    for _, _, index in chosen:
        tensor = graph.tensors[index]
        weights = tflite_file.constant_array(data, model, tensor).reshape(tuple(tensor.shape))
        scales = np.abs(weights).max(axis=tuple(range(1, weights.ndim))) / 127
        scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
        codes = affine.quantize(weights, scales, 0, np.int8, axis=0, ties="even")  # |codes| <= 127: symmetric
        stored = schema.BufferT()
        stored.data = codes.reshape(-1).view(np.uint8)
        model.buffers.append(stored)
        quantized = schema.TensorT()
        quantized.name, quantized.shape, quantized.type = tensor.name, list(tensor.shape), schema.TensorType.INT8
        quantized.buffer = len(model.buffers) - 1
        quantized.quantization = schema.QuantizationParametersT()
        quantized.quantization.scale = scales
        quantized.quantization.zeroPoint = np.zeros(len(scales), np.int64)
        quantized.quantization.quantizedDimension = 0
        graph.tensors.append(quantized)
        # the float tensor is now the DEQUANTIZE's output: computed, its floats stored no more
        if readers[tensor.buffer] == 1:
            model.buffers[tensor.buffer] = schema.BufferT()
        else:
            model.buffers.append(schema.BufferT())
            tensor.buffer = len(model.buffers) - 1
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = code, [len(graph.tensors) - 1], [index]
        dequantizes.append(op)
    graph.operators[:0] = dequantizes  # before every reader
    return tflite_file.write_model(model, external_from=data)


@dataclass(frozen=True)
class FusedLSTMWeights:
    """Which of a float model's fused-LSTM weight tensors a quantized build stores in int8
    (`plan_fused_lstm_weights`), applied to each model ai-edge-quantizer writes from it (it has
    no recipe for the op and leaves it float)."""

    names: tuple[str, ...]  # every float32 weight of the fused ops, in (op, input) order
    float32: frozenset  # the (fused op's position, input) pairs kept float32
    score: float | None  # the model with the others in int8, against the float model (None: not measured)
    allowed: float | None  # the loss of that score against 1 the plan accepted
    samples: int

    def apply(self, data: bytes, recipe: list[dict]) -> bytes:
        return with_int8_weights(data, self.float32) if _stores_int8_weights(recipe) else data

    def to_json(self) -> dict:
        return {
            "int8": len(self.names) - len(self.float32),
            "float32": len(self.float32),
            "compute": "float32 (weights read through DEQUANTIZE)",
            "score_vs_float_model": self.score,
            "allowed_loss": self.allowed,
            "samples": self.samples or "none given: every weight int8, not measured",
        }


def plan_fused_lstm_weights(
    float_tflite: bytes, eval_inputs: list | None, allowed_loss: float
) -> FusedLSTMWeights | None:
    """The fused-LSTM weights of `float_tflite` to store in int8: all of them where the model with
    them scores within `allowed_loss` of the float model (the budget's metric: mean per-sample
    cosine, or centered cosine) on `eval_inputs` (its layout); else the costliest, each measured
    alone, kept float32 one by one until it does. None: no fused LSTM. Without samples, all int8
    (the build's budget check still measures the result).

    Resemblyzer's first layer reads a mel power spectrogram: its input weights in int8 took the
    model to 0.83 cosine, the other 20 tensors in int8 to 0.996."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.litert_runtime import run_samples
    from tpuedge.quantize.metrics import compare_outputs

    model = tflite_file.read_model(float_tflite)
    weights = _fused_weights(model)
    if not weights:
        return None
    names = tuple(tflite_file.text(model.subgraphs[0].tensors[t].name) for _, _, t in weights)
    pairs = [(k, i) for k, i, _ in weights]
    if not eval_inputs:
        return FusedLSTMWeights(names, frozenset(), None, None, 0)
    reference = run_samples(float_tflite, eval_inputs)

    def score(float32: frozenset) -> float:
        summary = compare_outputs(reference, run_samples(with_int8_weights(float_tflite, float32), eval_inputs))
        return summary.centered_cosine if summary.sample_cosine is None else summary.sample_cosine

    kept, best = frozenset(), score(frozenset())
    if best < 1 - allowed_loss:
        every = frozenset(pairs)
        cost = {p: 1 - score(every - {p}) for p in pairs}
        for p in sorted(pairs, key=lambda q: -cost[q]):
            kept |= {p}
            best = score(kept)
            if best >= 1 - allowed_loss:
                break
    return FusedLSTMWeights(names, kept, round(best, 6), allowed_loss, len(eval_inputs))
