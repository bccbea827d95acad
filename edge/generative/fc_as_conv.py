"""An int8 FULLY_CONNECTED as the 1x1 CONV_2D that computes it (`fully_connected_as_conv`, in place).

TFLite-Micro's int8 FULLY_CONNECTED requantizes its accumulators with two roundings and LiteRT's
with one: measured, they differ by 1 LSB on about 0.08% of outputs (a value within 2^-shift of a
half). A decode step carries such a difference on through every later layer and through its KV
cache, and greedy continuations in the two runtimes part at the next near-tie (a character
LM: 3 of 4 prompts within 32 tokens). Both runtimes' int8 CONV_2D requantize alike (0 of 57,600
outputs differed on the same weights; 0 of 1.1 million in a decode step), so written as
convolutions the step's layers give the same bits in TFLite-Micro and in LiteRT's reference
kernels.

    x [..., in] -> RESHAPE [1, 1, rows, in] -> CONV_2D 1x1 (filter [out, 1, 1, in]) -> RESHAPE [..., out]

The filter is the same int8 bytes and per-channel scales (a new tensor over the weights' buffer:
no copy), the bias and the fused activation are kept (a layer without a bias gets zeros, which
LiteRT's int8 CONV_2D requires: 4 bytes an output), and so is every scale: the same integer
arithmetic up to the rounding.
"""

from __future__ import annotations

import numpy as np

from tpuedge.edge.flatbuffer import tflite_file

__all__ = ["fully_connected_as_conv"]

_CONV_VERSION = 3  # int8 with per-channel filter scales


def _opcode(model, builtin: int, version: int) -> int:
    """The index of `builtin`'s operator code in `model`, added when absent."""
    for index, code in enumerate(model.operatorCodes):
        if max(int(code.builtinCode), int(code.deprecatedBuiltinCode)) == builtin:
            code.version = max(int(code.version), version)
            return index
    schema = tflite_file.schema
    code = schema.OperatorCodeT()
    code.builtinCode = builtin
    code.deprecatedBuiltinCode = min(builtin, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
    code.version = version
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def _tensor(model, graph, like, name: str, shape, *, data: np.ndarray | None = None, buffer: int | None = None) -> int:
    """A new tensor of `like`'s type and quantization (or int32 constant `data`); its index."""
    schema = tflite_file.schema
    tensor = schema.TensorT()
    tensor.name, tensor.shape = name, np.asarray(shape, np.int32)
    if data is not None:
        stored = schema.BufferT()
        stored.data = np.ascontiguousarray(data, np.int32).view(np.uint8).reshape(-1)
        model.buffers.append(stored)
        tensor.type, tensor.buffer = schema.TensorType.INT32, len(model.buffers) - 1
    else:
        tensor.type, tensor.quantization = like.type, like.quantization
        if buffer is None:
            model.buffers.append(schema.BufferT())
            buffer = len(model.buffers) - 1
        tensor.buffer = buffer
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _operator(opcode: int, inputs, outputs, options_type: int, options):
    op = tflite_file.schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, np.asarray(inputs, np.int32), np.asarray(outputs, np.int32)
    op.builtinOptionsType, op.builtinOptions = options_type, options
    return op


def fully_connected_as_conv(model) -> int:
    """Every int8 FULLY_CONNECTED of `model` (a schema.ModelT) with constant 2-D weights written
    as RESHAPE, CONV_2D, RESHAPE, in place; how many."""
    schema = tflite_file.schema
    names = tflite_file.operator_names(model)
    options = schema.BuiltinOptions
    rewritten = 0
    for graph in model.subgraphs:
        operators, zeros = [], {}
        for op in graph.operators:
            weights = graph.tensors[int(op.inputs[1])] if names[op.opcodeIndex] == "FULLY_CONNECTED" else None
            x = graph.tensors[int(op.inputs[0])] if weights is not None else None
            if (
                weights is None
                or x.type != schema.TensorType.INT8
                or weights.type != schema.TensorType.INT8
                or len(weights.shape) != 2
                or not tflite_file.is_constant(model, weights)
            ):
                operators.append(op)
                continue
            y = graph.tensors[int(op.outputs[0])]
            out_features, in_features = (int(d) for d in weights.shape)
            rows = int(np.prod(x.shape)) // in_features
            base = tflite_file.text(y.name)
            x4 = _tensor(model, graph, x, f"{base}/conv_input", [1, 1, rows, in_features])
            y4 = _tensor(model, graph, y, f"{base}/conv_output", [1, 1, rows, out_features])
            filt = _tensor(
                model,
                graph,
                weights,
                f"{tflite_file.text(weights.name)}/filter",
                [out_features, 1, 1, in_features],
                buffer=weights.buffer,
            )
            shape_in = _tensor(
                model, graph, None, f"{base}/conv_input_shape", [4], data=np.array([1, 1, rows, in_features])
            )
            shape_out = _tensor(
                model, graph, None, f"{base}/conv_output_shape", [len(y.shape)], data=np.asarray(y.shape)
            )
            conv = schema.Conv2DOptionsT()
            conv.padding, conv.strideW, conv.strideH = schema.Padding.VALID, 1, 1
            conv.dilationWFactor = conv.dilationHFactor = 1
            conv.fusedActivationFunction = op.builtinOptions.fusedActivationFunction if op.builtinOptions else 0
            if len(op.inputs) > 2 and int(op.inputs[2]) >= 0:
                bias = int(op.inputs[2])
            else:  # LiteRT's int8 CONV_2D requires a bias: zeros, one tensor per width
                if out_features not in zeros:
                    zeros[out_features] = _tensor(
                        model,
                        graph,
                        None,
                        f"zero_bias_{out_features}",
                        [out_features],
                        data=np.zeros(out_features, np.int32),
                    )
                bias = zeros[out_features]
            reshape = _opcode(model, schema.BuiltinOperator.RESHAPE, 1)
            operators += [
                _operator(
                    reshape, [int(op.inputs[0]), shape_in], [x4], options.ReshapeOptions, schema.ReshapeOptionsT()
                ),
                _operator(
                    _opcode(model, schema.BuiltinOperator.CONV_2D, _CONV_VERSION),
                    [x4, filt, bias],
                    [y4],
                    options.Conv2DOptions,
                    conv,
                ),
                _operator(
                    reshape, [y4, shape_out], [int(op.outputs[0])], options.ReshapeOptions, schema.ReshapeOptionsT()
                ),
            ]
            rewritten += 1
        graph.operators = operators
    return rewritten
