"""`x.repeat(r)` as the view, expand and reshape it is: litert-torch's layout pass moves a repeat
into NHWC as it moves an elementwise op, its counts left in NCHW order, so the repeated tensor
got the wrong shape and the next op failed inside its converter ("Attempting to broadcast a
dimension of length 512 at -1 ... [1, 1, 32, 512] ... [1, 32, 32, 16]" at the residual add of a
U-Net whose pooled gate is repeated over the image). An expand keeps NCHW there, with the
transposes it needs around it. A dim of size 1 is repeated by expanding it; a longer one gets a
new axis of the count before it, expanded and merged into it by the reshape (tiles in order).
Exact; `broadcast-instead-of-expand` then drops an expand that only feeds a broadcasting op.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, rewritten_calls, static_shapes

__all__ = ["RepeatAsExpand"]


class RepeatAsExpand:
    name = "repeat-as-expand"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, repeats = node.args[0], [int(r) for r in node.args[1]]
            value = x.meta["val"]
            shape = [1] * (len(repeats) - value.dim()) + list(value.shape)
            viewed, expanded = [], []
            for size, count in zip(shape, repeats):
                if count == 1 or size == 1:
                    viewed.append(size)
                    expanded.append(size * count)
                else:  # the count as an axis of its own before the dim, merged into it below
                    viewed += [1, size]
                    expanded += [count, size]
            out = [size * count for size, count in zip(shape, repeats)]
            if viewed != list(value.shape):
                value = value.reshape(viewed)
                x = _with_value(graph.call_function(aten.view.default, (x, viewed)), value)
            value = value.expand(expanded)
            y = _with_value(graph.call_function(aten.expand.default, (x, expanded)), value)
            return y if expanded == out else graph.call_function(aten.reshape.default, (y, out))

        found = [n for n in call_functions(exported_program, {aten.repeat.default}) if static_shapes(n.args[0], n)]
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no repeat in the program",
            changed="wrote {count} repeat(s) as view, expand and reshape (RESHAPE, BROADCAST_TO)",
        )


def _with_value(node: Any, value: Any) -> Any:
    node.meta["val"] = value
    return node
