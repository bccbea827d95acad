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

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import built_in_place_of, call_functions, call_with_val, finish, replace_node

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
        found = [n for n in call_functions(exported_program, {aten.clamp.default, aten.clamp_max.default})
                 if (lambda lo, hi: (lo is None) != (hi is None))(*_bounds(n))]
        if not found:
            return exported_program, PassResult(self.name, 0, "no one-sided clamp in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        names = {n.name for n in found}
        for node in [n for n in graph.nodes if n.name in names]:
            x, (lo, hi) = node.args[0], _bounds(node)
            with built_in_place_of(node):
                if hi is None:
                    out = call_with_val(graph, aten.clamp_min.default, x, lo)
                else:
                    over = call_with_val(graph, aten.relu.default, call_with_val(graph, aten.sub.Tensor, x, hi))
                    out = call_with_val(graph, aten.sub.Tensor, x, over)
            replace_node(ep, node, out)
        finish(ep)
        return ep, PassResult(
            self.name, len(found), f"wrote {len(found)} one-sided clamp(s) as MAXIMUM or x - relu(x - max)"
        )
