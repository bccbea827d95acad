"""A complex magnitude, sqrt(a**2 + b**2), as the largest of a few projections: no power tensor.

    sqrt(a*a + b*b)  ->  g * max_k(M * cos t_k + m * sin t_k),  M = max(|a|, |b|), m = min(|a|, |b|)

with K angles t_k spread evenly over [0, pi/4] (the angle of (M, m) lies there) and g centring the
error. Why: the power a**2 + b**2 spans the square of the magnitude's range. A learned STFT's
power (silero-vad) runs from 1e-10 to 716: on any linear 16-bit grid (TFLite-Micro's widest
integer activations) its median bin is 0, and the model's output lost that alone (cosine 0.92,
measured with every tensor at 16 bits); the magnitude itself, and every tensor here, spans only
the magnitude's range. The projection onto the nearest angle falls short by at most
cos(pi / (4 (K - 1))); scaled by g = 2 / (1 + that), the result is within 0.08% of the exact
magnitude at K = 8, far below a 16-bit activation's step. The build reports the rewrite's
measured cost against the original float program, as for every mcu rewrite.

The forms audio front ends write are all taken: x*x or x**2 (two slices of one tensor count as
one x), squares of different but broadcastable shapes, more than two squares, a constant added
for a stable gradient (re**2 + im**2 + 1e-8) and a clamp from below (sqrt(clamp(p, min=eps))).
More parts nest: |(a, b, c)| = |(|(a, b)|, c)|, a constant c being sqrt(c) (within 0.08% a level);
the clamp is a last max, sqrt being monotonic.
"""

from __future__ import annotations

import math
from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["MagnitudeAsProjections", "ANGLES"]

ANGLES = 8


def _same_value(x: Any, y: Any) -> bool:
    """`x` and `y` compute the same thing: one node, or two calls of one op on the same operands
    (`x[:, :8] * x[:, :8]` exports as two slices)."""
    return x is y or (
        getattr(x, "op", None) == getattr(y, "op", None) == "call_function"
        and x.target == y.target
        and x.args == y.args
        and x.kwargs == y.kwargs
    )


def _squared(node: Any, aten) -> Any | None:
    """x when `node` is x * x, x ** 2 or square(x)."""
    if getattr(node, "target", None) == aten.square.default:
        return node.args[0]
    if getattr(node, "target", None) == aten.mul.Tensor and _same_value(node.args[0], node.args[1]):
        return node.args[0]
    if getattr(node, "target", None) == aten.pow.Tensor_Scalar and node.args[1] == 2:
        return node.args[0]
    return None


def _sum_terms(node: Any, aten, root: bool = True) -> tuple[list, float] | None:
    """(the x of each x**2, the constants) when `node` is a sum of squares and non-negative
    constants (a**2 + b**2, a**2 + b**2 + c**2, re**2 + im**2 + 1e-8), each part read by nothing
    else; else None."""
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return ([], float(node)) if node >= 0 else None
    if not root and len(node.users) != 1:
        return None
    target = getattr(node, "target", None)
    if target in (aten.add.Tensor, aten.add.Scalar) and node.kwargs.get("alpha", 1) == 1 and len(node.args) == 2:
        parts = [_sum_terms(arg, aten, root=False) for arg in node.args]
        if any(p is None for p in parts):
            return None
        return parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]
    x = _squared(node, aten)
    return None if x is None else ([x], 0.0)


def _operands(node: Any, aten) -> tuple[list, float, float] | None:
    """(the squared tensors, the constant summed with their squares, a lower bound the sum is
    clamped to) when `node` is sqrt of such a sum (optionally clamped from below), with at
    least one square and two parts; else None."""
    inside, floor = node.args[0], 0.0
    if getattr(inside, "target", None) in (aten.clamp_min.default, aten.clamp.default) and len(inside.users) == 1:
        low, high = (list(inside.args[1:]) + [None, None])[:2]
        if inside.target == aten.clamp.default:
            low, high = inside.kwargs.get("min", low), inside.kwargs.get("max", high)
        if high is not None or not isinstance(low, (int, float)) or low < 0:
            return None
        inside, floor = inside.args[0], float(low)
    found = _sum_terms(inside, aten)
    if found is None or not found[0] or len(found[0]) + (found[1] > 0) < 2:
        return None
    squares, constant = found
    if not all(x.meta["val"].dtype.is_floating_point for x in squares):
        return None
    return squares, constant, floor


def _magnitude(graph, aten, a, b, *, a_positive: bool = False):
    """|(a, b)| for a tensor `a` and a tensor or non-negative number `b`, as the largest of the
    projections (`a_positive`: a is a magnitude already, its own absolute value)."""
    step = (math.pi / 4) / (ANGLES - 1)
    gain = 2.0 / (1.0 + math.cos(step / 2))

    def absolute(x):  # ai-edge-quantizer has no integer recipe for ABS: |x| = max(x, -x)
        return call_with_val(graph, aten.maximum.default, x, call_with_val(graph, aten.mul.Tensor, x, -1.0))

    u = a if a_positive else absolute(a)
    if isinstance(b, float):  # a constant part: max and min against a number
        big = call_with_val(graph, aten.clamp_min.default, u, b)
        small = call_with_val(graph, aten.sub.Tensor, call_with_val(graph, aten.add.Tensor, u, b), big)
    else:  # nor for MINIMUM: min(u, v) = u + v - max(u, v)
        v = absolute(b)
        big = call_with_val(graph, aten.maximum.default, u, v)
        small = call_with_val(graph, aten.sub.Tensor, call_with_val(graph, aten.add.Tensor, u, v), big)
    best = None
    for k in range(ANGLES):
        angle = k * step
        projection = call_with_val(graph, aten.mul.Tensor, big, gain * math.cos(angle))
        if k:
            projection = call_with_val(
                graph, aten.add.Tensor, projection, call_with_val(graph, aten.mul.Tensor, small, gain * math.sin(angle))
            )
        best = projection if best is None else call_with_val(graph, aten.maximum.default, best, projection)
    return best


def _projections(graph, aten, squares: list, constant: float, floor: float):
    """sqrt(max(sum of x**2 + constant, floor)) as nested 2-D magnitudes: |(a, b, c)| = |(|(a, b)|, c)|,
    a constant part being sqrt(constant), and the floor a last max (sqrt is monotonic)."""
    parts = [*squares, *([math.sqrt(constant)] if constant > 0 else [])]
    result = _magnitude(graph, aten, parts[0], parts[1])
    for part in parts[2:]:
        result = _magnitude(graph, aten, result, part, a_positive=True)
    if floor > 0:
        result = call_with_val(graph, aten.clamp_min.default, result, math.sqrt(floor))
    return result


class MagnitudeAsProjections:
    name = "magnitude-as-projections"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            found = _operands(node, aten)
            return None if found is None else _projections(graph, aten, *found)

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.sqrt.default}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no magnitude sqrt(a**2 + b**2 [+ ...]) in the program")
        return ep, PassResult(
            self.name,
            count,
            f"wrote {count} magnitude(s) sqrt(a**2 + b**2 [+ ...]) as the largest of {ANGLES} projections (no power "
            "tensor, whose range is the magnitude's squared: a 16-bit grid zeroes its small values)",
        )
