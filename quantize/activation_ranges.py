"""Activation ranges keyed by IR node: where an int8 graph quantizes, and to which range.

One decision on the `Program` (its ranges: shared_ir/node_ranges.py), read by every consumer:
quantization-aware training fakes int8 at these points (cloud/fake_quant.py), and the edge builds
give the matching flatbuffer tensors these ranges instead of calibrating them
(edge/litert/trained_ranges.py).

Where an int8 TFLite graph holds an int8 tensor, as the converter and ai-edge-quantizer build it:
  - every float model input;
  - the output of each op that computes a new value, except an op whose only user is an
    activation the converter fuses into it (conv/linear/add -> relu): there the activation's
    output is the one int8 tensor;
  - ops that only move or select values (reshape, flatten, permute, max pooling, dropout in
    eval) keep their input's int8 values: they inherit its range and are not points;
  - ops on constants alone are folded by the converter: not points.
Weights: per-output-channel symmetric int8 for every conv and linear weight (axis 0).
Sigmoid, tanh and softmax outputs have the fixed ranges TFLite's int8 kernels impose.
Where the int8 kernel computing a point is known (conv, linear, mul, add, mean), its
arithmetic is recorded too (quantize/integer_kernels.py), so an eval can reproduce it.

The int8 scheme for a range is ai-edge-quantizer's (`int8_affine`): the range is widened to
hold 0, scale = (max - min) / 255, zero point = rint(-128 - min / scale).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpuedge.quantize.integer_kernels import IntegerKernel, integer_kernels

__all__ = [
    "QuantPoints",
    "quant_points",
    "int8_affine",
    "FIXED_RANGES",
    "SAME_GRID_OPS",
    "INT8_MIN",
    "INT8_MAX",
    "WEIGHT_MAX",
]

INT8_MIN, INT8_MAX = -128, 127
WEIGHT_MAX = 127  # symmetric weights use [-127, 127]

# ops whose output holds (a selection of) its first input's values: same int8 grid
SAME_GRID_OPS = {
    "aten.view.default",
    "aten.reshape.default",
    "aten.flatten.using_ints",
    "aten.permute.default",
    "aten.transpose.int",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.unsqueeze.default",
    "aten.t.default",
    "aten.max_pool2d.default",
    "aten.max_pool1d.default",
    "aten.adaptive_max_pool2d.default",
    "aten.dropout.default",
    "aten.clone.default",
    "aten.contiguous.default",
    "aten.expand.default",
    "aten.alias.default",
    "_operator.getitem",
    "aten.select.int",
    "aten.slice.Tensor",
    "aten.narrow.default",
    "aten.unbind.int",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.chunk.default",
    "aten.squeeze.default",
    "aten.unflatten.int",
    "aten.view_as.default",
    "aten.reshape_as.default",
}
# activations the converter folds into the op before them, and the ops it folds them into
_FUSED_ACTIVATIONS = {"aten.relu.default", "aten.relu_.default", "aten.relu6.default", "aten.hardtanh.default"}
_FUSING_PRODUCERS = {
    "aten.conv1d.default",
    "aten.conv2d.default",
    "aten.linear.default",
    "aten.add.Tensor",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.addmm.default",
    "aten.mm.default",
}
# ops whose int8 output the TFLite kernels fix whatever the data: LOGISTIC and SOFTMAX scale
# 1/256 zero point -128 ([0, 255/256]), TANH scale 1/128 zero point 0 ([-1, 127/128])
FIXED_RANGES = {
    "aten.sigmoid.default": (0.0, 255 / 256),
    "aten.softmax.int": (0.0, 255 / 256),
    "aten._softmax.default": (0.0, 255 / 256),
    "aten.tanh.default": (-1.0, 127 / 128),
}
_WEIGHTED = {"aten.conv1d.default": 1, "aten.conv2d.default": 1, "aten.linear.default": 1}  # op -> weight arg


def int8_affine(lo: Any, hi: Any, xp: Any = np) -> tuple[Any, Any]:
    """(scale, zero_point) of asymmetric per-tensor int8 for the range [lo, hi] (xp: numpy or jax.numpy)."""
    lo = xp.minimum(lo, 0.0)
    hi = xp.maximum(hi, 0.0)
    scale = xp.maximum(hi - lo, 1e-9) / (INT8_MAX - INT8_MIN)
    return scale, xp.round(INT8_MIN - lo / scale)


@dataclass(frozen=True)
class QuantPoints:
    """Where the program quantizes: activation points, inherited ranges, and int8 weights."""

    points: tuple[str, ...]  # IR node names (model inputs included), graph order
    inherits: dict[str, str] = field(default_factory=dict)  # non-point node -> the point whose grid it keeps
    weights: dict[str, int] = field(default_factory=dict)  # parameter state name -> channel axis
    fixed: dict[str, tuple[float, float]] = field(default_factory=dict)  # point -> the range its kernel fixes
    kernels: dict[str, IntegerKernel] = field(
        default_factory=dict
    )  # point -> its int8 kernel's arithmetic, where known


def _key(node) -> str:
    from tpuedge.shared_ir.op_registry import op_key

    return op_key(node.target)


def quant_points(program) -> QuantPoints:
    """The int8 quantization points of `program` (module docstring)."""
    from torch.export.graph_signature import InputKind

    ep = program.exported_program
    sig = ep.graph_signature
    user_inputs = {s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT}
    params = {s.arg.name: s.target for s in sig.input_specs if s.kind == InputKind.PARAMETER}
    points: list[str] = []
    inherits: dict[str, str] = {}
    weights: dict[str, int] = {}
    fixed: dict[str, tuple[float, float]] = {}

    def is_float(node) -> bool:
        val = node.meta.get("val")
        return hasattr(val, "dtype") and val.dtype.is_floating_point

    constant: set[str] = set()  # nodes that read no model input: the converter folds them
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if node.name not in user_inputs:
                constant.add(node.name)
            elif is_float(node):
                points.append(node.name)
            continue  # an integer input (token ids) is no point, but what it reaches is no constant
        if node.op != "call_function":
            continue
        if all(a.name in constant for a in node.all_input_nodes):
            constant.add(node.name)  # e.g. an LSTM's two biases summed: one int32 bias in the int8 graph
            continue
        if not is_float(node):
            continue
        key = _key(node)
        if key in _WEIGHTED and len(node.args) > _WEIGHTED[key]:
            weight = node.args[_WEIGHTED[key]]
            if getattr(weight, "name", None) in params:
                weights[params[weight.name]] = 0
        source = node.args[0] if node.args and hasattr(node.args[0], "name") else None
        if key in SAME_GRID_OPS and source is not None:
            inherits[node.name] = inherits.get(source.name, source.name)
            continue
        users = list(node.users)
        if key in _FUSING_PRODUCERS and len(users) == 1 and _key(users[0]) in _FUSED_ACTIVATIONS:
            continue  # its activation's output is the int8 tensor
        points.append(node.name)
        if key in FIXED_RANGES:
            fixed[node.name] = FIXED_RANGES[key]
    return QuantPoints(
        tuple(points), inherits, weights, fixed, integer_kernels(ep.graph, tuple(points), inherits, params)
    )
