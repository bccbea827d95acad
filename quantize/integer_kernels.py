"""Which TFLite integer kernel computes each int8 quantization point, read off the IR.

An int8 TFLite kernel does not round a float result: it sums integers in int32 and rescales
the sum to the output's grid with a fixed-point multiplier and two roundings (TFLite's
`MultiplyByQuantizedMultiplier`). Rounding the float result lands on the same int8 value
except near a tie, and a steep op after it (a sigmoid) turns that one step into several.
So the QAT model's eval reproduces the kernels' arithmetic where it knows it
(cloud/int8_arithmetic.py) and needs, per point, what this module records:

  - "weighted": a conv or linear (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED): int8 input,
    per-channel int8 weight, int32 bias on the scale input x weight;
  - "mul": MUL of two int8 tensors;
  - "add": ADD of two int8 tensors (each rescaled to twice the larger scale, 20 bits up);
  - "mean": MEAN over some axes (global average pooling too, which the converter makes a MEAN);
  - each may be followed by an activation the converter fuses (relu, relu6, hardtanh),
    which becomes a clamp of the int8 result.

Points computed by other ops (sigmoid, softmax, ...) keep the float-then-round fake int8.
Not CONCATENATION/PACK: requantizing each input onto the output's grid matched TFLite-Micro
worse than rounding (a two-branch CNN: 81.8% of outputs identical against 86.6%), so the int8
graph does not join its inputs' own grids that way; not reproduced yet.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IntegerKernel", "integer_kernels"]

_WEIGHTED = {"aten.conv1d.default": 1, "aten.conv2d.default": 1, "aten.linear.default": -1}  # op -> output channel axis
_TWO_TENSORS = {"aten.mul.Tensor": "mul", "aten.add.Tensor": "add"}
# fused activation -> the bounds it clamps to (None: no upper bound)
_CLAMPS = {"aten.relu.default": (0.0, None), "aten.relu_.default": (0.0, None), "aten.relu6.default": (0.0, 6.0)}


@dataclass(frozen=True)
class IntegerKernel:
    """How TFLite's int8 kernel computes one point (see the module docstring)."""

    kind: str  # "weighted", "mul", "add" or "mean"
    producer: (
        str  # the node whose float value holds the kernel's sum (the point, or the op its fused activation follows)
    )
    inputs: tuple[str, ...]  # nodes whose int8 values the kernel reads
    grids: tuple[str, ...]  # the quantization point whose grid each input is on
    weight: str | None = None  # the weight's parameter state name ("weighted")
    bias: str | None = None  # the bias: its parameter state name, or the node folding it
    channel_axis: int = 1  # the output's channel axis ("weighted")
    dims: tuple[int, ...] = ()  # reduced axes ("mean")
    clamp: tuple[float, float | None] | None = None  # a fused activation's bounds


def _op(node) -> str:
    from tpuedge.shared_ir.op_registry import op_key

    return op_key(node.target)


def _clamp(node) -> tuple[float, float | None] | None:
    if _op(node) == "aten.hardtanh.default":
        return (float(node.args[1]) if len(node.args) > 1 else -1.0, float(node.args[2]) if len(node.args) > 2 else 1.0)
    return _CLAMPS.get(_op(node))


def _kernel(producer, grid_of, params: dict[str, str]) -> IntegerKernel | None:
    key = _op(producer)
    args = producer.args
    if key in _WEIGHTED:
        bias = args[2] if len(args) > 2 else None  # (grouped and depthwise convolutions sum the same way)
        weight = params.get(getattr(args[1], "name", None))
        if weight is None or grid_of(args[0]) is None or (bias is not None and not hasattr(bias, "name")):
            return None
        # a parameter bias is read by its state name, a folded one (an LSTM's two summed) by its node
        return IntegerKernel(
            "weighted",
            producer.name,
            (args[0].name,),
            (grid_of(args[0]),),
            weight,
            params.get(bias.name, bias.name) if bias is not None else None,
            _WEIGHTED[key],
        )
    if key in _TWO_TENSORS and len(args) == 2 and not producer.kwargs.get("alpha"):
        grids = tuple(grid_of(a) if hasattr(a, "name") else None for a in args)
        if None in grids:
            return None  # a constant operand: how the converter quantizes it is not known here
        return IntegerKernel(_TWO_TENSORS[key], producer.name, tuple(a.name for a in args), grids)
    if key == "aten.adaptive_avg_pool2d.default" and grid_of(args[0]) is not None and tuple(args[1]) in ((1, 1), (1,)):
        return IntegerKernel("mean", producer.name, (args[0].name,), (grid_of(args[0]),), dims=(2, 3))
    if key == "aten.mean.dim" and grid_of(args[0]) is not None:
        rank = len(args[0].meta["val"].shape)
        dims = tuple(sorted(d % rank for d in args[1]))
        return IntegerKernel("mean", producer.name, (args[0].name,), (grid_of(args[0]),), dims=dims)
    return None


def integer_kernels(
    graph, points: tuple[str, ...], inherits: dict[str, str], params: dict[str, str]
) -> dict[str, IntegerKernel]:
    """point -> its IntegerKernel, for the points a known kernel computes.

    params: parameter placeholder name -> state name (the graph signature's PARAMETER inputs).
    """
    point_set = set(points)

    def grid_of(node) -> str | None:  # None: not on a point's grid (a constant, an integer tensor)
        grid = inherits.get(node.name, node.name)
        return grid if grid in point_set else None

    kernels: dict[str, IntegerKernel] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.name not in point_set:
            continue
        clamp = _clamp(node)
        producer = node.args[0] if clamp is not None and hasattr(node.args[0], "name") else node
        if producer is not node and producer.name in point_set:
            continue  # the activation was not fused: its producer has its own int8 tensor
        kernel = _kernel(producer, grid_of, params)
        if kernel is not None:
            kernels[node.name] = IntegerKernel(**{**kernel.__dict__, "clamp": clamp})
    return kernels
