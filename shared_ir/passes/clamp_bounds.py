"""Clamps with one bound as the ops TFLite-Micro runs in int8.

    clamp(x, min=lo)              -> clamp_min(x, lo)      MAXIMUM
    clamp(x, max=hi), clamp_max   -> x - relu(x - hi)      SUB, RELU, SUB  (= min(x, hi), exact)

litert-torch lowers a clamp to MAXIMUM and/or MINIMUM, but the mcu op data keys on the op, not
its arguments, so `x.clamp(min=1e-9)` (a mean over a mask, a norm's floor) was refused for
the MINIMUM of the two-bound form; and ai-edge-quantizer leaves MINIMUM in float, so an upper
bound alone needs another form. Two-bound clamps stay: the converter fuses 0..6 and -1..1 into
the layer before them, and the check reports the others.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["OneSidedClamps"]


def _bounds(node) -> tuple[Any, Any]:
    import torch

    if node.target == torch.ops.aten.clamp_max.default:
        return None, node.args[1]
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    return lo, hi


class OneSidedClamps:
    name = "one-sided-clamps"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        def rewrite(graph, node):
            x, (lo, hi) = node.args[0], _bounds(node)
            if hi is None:
                return call_with_val(graph, aten.clamp_min.default, x, lo)
            over = call_with_val(graph, aten.relu.default, call_with_val(graph, aten.sub.Tensor, x, hi))
            return call_with_val(graph, aten.sub.Tensor, x, over)

        found = [n for n in call_functions(exported_program, {aten.clamp.default, aten.clamp_max.default})
                 if (lambda lo, hi: (lo is None) != (hi is None))(*_bounds(n))]
        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no one-sided clamp in the program")
        return ep, PassResult(
            self.name, count, f"wrote {count} one-sided clamp(s) as MAXIMUM or x - relu(x - max)"
        )
