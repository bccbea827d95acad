"""One step picked from a stacked sequence is that step: `select(stack(xs, d), d, i)` -> `xs[i]`.

A sequence classifier reads the last step of its recurrent layer (`out[:, -1]`). Unrolled
(shared_ir/passes/recurrent_layers.py), the layer's output is the stack of every step's h, so
the model stacked 8 tensors to read one: in an int8 file a CONCATENATION and a requantizing
QUANTIZE for each step whose scale differs from the stack's (7 of 8 in the zoo's digit GRU), ops
and tensor tables that made up a tenth of that file, and work on every inference. Picking the
item straight from what was stacked leaves the stack unused, and it goes.

Also, exactly:
- `select(cat(xs, d), d, i)`: the select of the one input that holds index i, shifted;
- `select(cat(xs, e), d, i)` with e != d, where each input is itself a stack or cat (a
  bidirectional layer's directions side by side): the cat of each input's select, which the
  next round simplifies.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["SelectFromStack"]

_MAX_ROUNDS = 8  # a cat of stacks takes two; nested ones one more each


def _rank(node) -> int | None:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return None if val is None or not hasattr(val, "shape") else len(val.shape)


def _picked(graph, aten, node) -> Any:
    """What `node` (a select) is in terms of the stack or cat it reads, or None."""
    source, dim, index = node.args[0], node.args[1], node.args[2]
    rank = _rank(source) if getattr(source, "op", None) == "call_function" else None
    if rank is None or source.target not in (aten.stack.default, aten.cat.default):
        return None
    items = list(source.args[0])
    joined_on = (source.args[1] if len(source.args) > 1 else 0) % rank
    dim %= rank
    if source.target is aten.stack.default:
        return items[index % len(items)] if joined_on == dim else None
    if any(_rank(item) != rank for item in items):  # torch's cat also skips 1-D empty tensors
        return None
    if joined_on != dim:
        if any(getattr(item, "target", None) not in (aten.stack.default, aten.cat.default) for item in items):
            return None  # nothing to pick from: one select would become one per input
        picks = [call_with_val(graph, aten.select.int, item, dim, index) for item in items]
        return call_with_val(graph, aten.cat.default, picks, joined_on - (joined_on > dim))
    at, offset = index % source.meta["val"].shape[dim], 0
    for item in items:
        size = item.meta["val"].shape[dim]
        if offset <= at < offset + size:
            return call_with_val(graph, aten.select.int, item, dim, at - offset)
        offset += size
    return None


class SelectFromStack:
    name = "select-from-stack"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        total = 0
        for _ in range(_MAX_ROUNDS):
            found = [
                n
                for n in call_functions(exported_program, {aten.select.int})
                if getattr(n.args[0], "target", None) in (aten.stack.default, aten.cat.default)
            ]
            exported_program, count = rewrite_calls(
                exported_program, found, lambda graph, node: _picked(graph, aten, node)
            )
            total += count
            if not count:
                break
        if not total:
            return exported_program, PassResult(self.name, 0, "no step picked from a stack or cat")
        return exported_program, PassResult(
            self.name, total, f"read {total} step(s) from what was stacked, not from the stack"
        )
