"""mcu: integer biases written without the quantization tables TFLite-Micro never reads.

ai-edge-quantizer gives the int32 (int64 under 16-bit activations) bias of each CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED a per-channel table: a float32 scale (input scale x
weight scale) and an int64 zero point (always 0) per output channel, about 13 bytes per channel
once the vectors' headers count. TFLite-Micro's int8 and 16x8 kernels (and LiteRT's builtin
ones) derive the bias's scale from the input's and the weights' and only require a zero point
of 0, which a tensor without quantization has. On depthwise-heavy nets the table is most of
what an int8 file carries beyond its weights (MobileNets, ShuffleNets, RegNets: thousands of
channels of 9 weights each), and on a board it is flash.

mcu only: LiteRT's XNNPACK delegate checks those tables and leaves an op without one to the
builtin kernels (same numbers, slower), and a per-tensor table makes it fail to prepare; and
TRANSPOSE_CONV's LiteRT kernel reads its bias table (its outputs change without it).

Except where a kernel does read it: FULLY_CONNECTED whose weights have one scale (per tensor,
or a layer of one output, such as a beat tracker's or a detector's score head) takes the
per-tensor path, which requires |input scale x weight scale - bias scale| / output scale <= 0.02
(edge/mcu/data/tflm_ops.json, "reads_bias_scale"). Without its table the bias's scale is 0 and
the layer prepares only while its own multiplier is under 0.02: a head whose outputs span a
narrow range failed in TFLite-Micro's (and LiteRT's) prepare, after the whole build had run.

Only a constant integer tensor that every reader takes as the bias of one of those ops, where the
op's kernel does not read its scale, loses its table; a bias another op also reads, or a computed
one, keeps it.
tests/test_bias_quantization.py runs both interpreters on a model before and after and compares
the outputs bit for bit.
"""

from __future__ import annotations

from tpuedge.edge.flatbuffer import tflite_file

__all__ = ["BIAS_INPUT", "drop_bias_quantization"]

# op -> the input position of its bias
BIAS_INPUT = {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2}
_INTEGER_BIAS = ("int32", "int64")


def drop_bias_quantization(model) -> int:
    """Drop those bias tables from `model` (a `schema.ModelT`, read by tflite_file.read_model), in
    place; how many were dropped."""
    names = tflite_file.operator_names(model)
    dropped = 0
    for graph in model.subgraphs:
        tensors = graph.tensors or []
        as_bias: dict[int, bool] = {}  # tensor -> read only as a bias whose scale no kernel reads, so far
        for op in graph.operators or []:
            name = names[op.opcodeIndex]
            bias_at = None if _reads_bias_scale(name, tensors, op) else BIAS_INPUT.get(name)
            for position, index in enumerate(op.inputs if op.inputs is not None else []):
                if index >= 0:
                    as_bias[int(index)] = as_bias.get(int(index), True) and position == bias_at
        for index, only_bias in as_bias.items():
            tensor = tensors[index]
            if (
                only_bias
                and tflite_file.is_constant(model, tensor)
                and tflite_file.dtype_name(tensor.type) in _INTEGER_BIAS
                and tflite_file.tensor_quantization(tensor)[0].size
            ):
                tensor.quantization = None
                dropped += 1
    return dropped


def _reads_bias_scale(name: str, tensors, op) -> bool:
    """Whether TFLite-Micro's kernel for `op` reads its bias's scale: an op the op data marks
    ("reads_bias_scale") whose weights have a single scale."""
    from tpuedge.edge.mcu.tflm_ops import tflm_ops

    if not tflm_ops().get(name, {}).get("reads_bias_scale") or op.inputs is None or len(op.inputs) < 2:
        return False
    return tflite_file.tensor_quantization(tensors[int(op.inputs[1])])[0].size == 1
