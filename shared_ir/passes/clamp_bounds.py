"""Clamps as the ops TFLite-Micro runs in int8.

    clamp(x, min=lo)              -> clamp_min(x, lo)                MAXIMUM
    clamp(x, max=hi), clamp_max   -> -max(-x, -hi)                   MUL, MAXIMUM, MUL  (= min(x, hi), exact)
    clamp(x, lo, hi)              -> -max(-max(x, lo), -hi)          MAXIMUM, MUL, MAXIMUM, MUL (exact)

litert-torch lowers a clamp to MAXIMUM and/or MINIMUM, but the mcu op data keys on the op, not
its arguments, so `x.clamp(min=1e-9)` (a mean over a mask, a norm's floor) was refused for
the MINIMUM of the two-bound form; and ai-edge-quantizer leaves MINIMUM in float, so an upper
bound needs another form. (The form before, x - relu(x - hi), converts to a SUB with a fused
RELU whose int8 kernel aborted TFLite-Micro on a conv's 4-D output.) Two-bound clamps over 0..6
and -1..1 stay: the converter fuses them into the layer before them as RELU6 / RELU_N1_TO_1;
any other pair of bounds (`clamp(0, 1)`, `clamp(-0.5, 0.5)`) was refused by the check before.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewrite_calls

__all__ = ["OneSidedClamps"]

_FUSED_BOUNDS = {(0.0, 6.0), (-1.0, 1.0)}  # the converter fuses these into the op before: RELU6, RELU_N1_TO_1


def _bounds(node) -> tuple[Any, Any]:
    given = call_arguments(node)
    return given.get("min"), given.get("max")  # clamp_min / clamp_max have one of them


class OneSidedClamps:
    name = "one-sided-clamps"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, (lo, hi) = node.args[0], _bounds(node)
            if lo is not None:
                x = call_with_val(graph, aten.clamp_min.default, x, lo)
            if hi is None:
                return x
            flipped = call_with_val(graph, aten.clamp_min.default, call_with_val(graph, aten.mul.Tensor, x, -1.0), -hi)
            return call_with_val(graph, aten.mul.Tensor, flipped, -1.0)

        def rewritten(node) -> bool:
            lo, hi = _bounds(node)
            if lo is None or hi is None:
                return lo is not None or hi is not None
            numbers = all(isinstance(b, (int, float)) for b in (lo, hi))
            return numbers and (float(lo), float(hi)) not in _FUSED_BOUNDS

        found = [
            n for n in call_functions(exported_program, {aten.clamp.default, aten.clamp_max.default}) if rewritten(n)
        ]
        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no clamp TFLite-Micro lacks in the program")
        return ep, PassResult(self.name, count, f"wrote {count} clamp(s) as MAXIMUM and/or -max(-y, -max)")
