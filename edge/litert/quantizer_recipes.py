"""QuantConfig -> the ai-edge-quantizer recipe for a float .tflite: its scheme for every op, then
each sensitive group's precision (edge/litert/sensitive_groups.py) as entries on the group's
op scopes, in an order that makes the more precise choice win an op two groups share.
"""

from __future__ import annotations

import re

from tpuedge.edge.litert.sensitive_groups import GroupScopes, is_every_op
from tpuedge.quantize.config import QuantConfig

__all__ = ["quantizer_recipe"]


def _scope_regex(scopes: list[tuple[str, str]]) -> str:
    return "^(?:" + "|".join(re.escape(scope) for scope, _ in scopes) + ")$"


_PRECEDENCE = {"int8": 0, "int16": 1, "float": 2, "float32": 3}  # quantizer_recipe: the later entry wins an op
# the ops ai-edge-quantizer can give int8 weights with float compute (weight-only, explicit DEQUANTIZE)
_WEIGHT_ONLY_OPS = (
    "FULLY_CONNECTED",
    "BATCH_MATMUL",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "CONV_2D_TRANSPOSE",
    "EMBEDDING_LOOKUP",
)


def quantizer_recipe(
    config: QuantConfig, assignment: dict[str, str] | None = None, scopes: GroupScopes | None = None
) -> list[dict]:
    """The ai-edge-quantizer recipe (JSON-able list) for `config`; None-equivalent for "none".

    assignment: sensitive group -> "int8" | "int16" | "float" | "float32" (int8; dynamic-int8 reads float32 only).
    """
    from ai_edge_quantizer import qtyping, recipe_manager
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    gran = qtyping.QuantGranularity.CHANNELWISE if config.per_channel else qtyping.QuantGranularity.TENSORWISE
    rm = recipe_manager.RecipeManager()
    if config.scheme == "fp16":
        rm.add_weight_only_config(".*", "*", num_bits=16, algorithm_key=AlgorithmName.FLOAT_CASTING)
    elif config.scheme == "dynamic-int8":
        rm.add_dynamic_config(".*", "*", num_bits=8, granularity=gran)
        for key, precision in sorted((assignment or {}).items()):  # the float32-weights rung's ops: unquantized
            if precision == "float32":
                rm.add_quantization_config(
                    _scope_regex((scopes or {})[key]), "*", algorithm_key=AlgorithmName.NO_QUANTIZE
                )
    elif config.scheme == "int8":
        rm.add_static_config(".*", "*", activation_num_bits=8, weight_num_bits=8, weight_granularity=gran)
        # an op in two groups takes the more precise choice (ai-edge-quantizer: a later entry wins);
        # in key order, a ranked group's int16 overrode the float island a later search put on the
        # same ops, and Resemblyzer's float LSTM island scored as its int16 one (0.843 both)
        for key, precision in sorted((assignment or {}).items(), key=lambda kp: (_PRECEDENCE[kp[1]], kp[0])):
            if precision == "int8":
                continue
            if is_every_op(key) and precision == "int16" and config.io_dtype == "integer":
                # the model's inputs and outputs too (an integer input read by 16-bit ops only
                # loses its low bits at the door: silero-vad's audio in 8 bits cost 0.91 cosine on
                # its own); "int8" I/O asked for int8 ends, which the quantizer then requantizes
                for end in ("INPUT", "OUTPUT"):
                    rm.add_static_config(".*", end, activation_num_bits=16, weight_num_bits=8, weight_granularity=gran)
            if is_every_op(key):  # one entry per op type: 16-bit activations, or float compute with int8 weights
                for _, op in (scopes or {})[key]:
                    if precision == "int16":
                        rm.add_static_config(
                            ".*", op, activation_num_bits=16, weight_num_bits=8, weight_granularity=gran
                        )
                        continue
                    if op in _WEIGHT_ONLY_OPS:  # float compute with int8 weights: its one entry
                        rm.add_weight_only_config(".*", op, num_bits=8, granularity=gran)
                    else:
                        rm.add_quantization_config(".*", op, algorithm_key=AlgorithmName.NO_QUANTIZE)
                continue
            regex = _scope_regex((scopes or {})[key])
            if precision == "float32":  # last of all: no entry after it gives these ops int8 weights
                rm.add_quantization_config(regex, "*", algorithm_key=AlgorithmName.NO_QUANTIZE)
            elif precision == "int16":
                rm.add_static_config(regex, "*", activation_num_bits=16, weight_num_bits=8, weight_granularity=gran)
            else:  # a float island: float compute, but its weights stay int8 (dequantized once, at load);
                # int8 weights keep islands small (MiniLM-L6 int8: 1.03x its parameter bytes, 1.26x with float32 ones)
                rm.add_quantization_config(regex, "*", algorithm_key=AlgorithmName.NO_QUANTIZE)
                for op in _WEIGHT_ONLY_OPS:  # a later entry wins for its op; the island's other ops stay float
                    rm.add_weight_only_config(regex, op, num_bits=8, granularity=gran)
        if config.io_dtype == "float32":  # last: a later entry wins, and a group may hold the op at an output
            rm.add_quantization_config(".*", "INPUT", algorithm_key=AlgorithmName.NO_QUANTIZE)
            rm.add_quantization_config(".*", "OUTPUT", algorithm_key=AlgorithmName.NO_QUANTIZE)
    else:
        return []
    return rm.get_quantization_recipe()
