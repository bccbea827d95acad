"""Reflect, replicate and circular padding as slices + one concatenation per padded dim.

TFLite lowers `reflection_padNd`/`replication_padNd` to ABS/SUB/LESS/SELECT/GATHER_ND, and
TFLite-Micro has no SELECT kernel. The same values are the input's own border rows and
columns, so each padded dim becomes a concatenation of one-wide slices (STRIDED_SLICE) around
the input (CONCATENATION): exact in float and in int8 (slices and concatenation move values,
they compute nothing). Runs after `ExplicitPad`, which names the mode in the op.

A dim padded by more positions than the target's concatenation takes inputs (TFLite-Micro's
CONCATENATION: 10, `kMaxInputNum`) would need a concatenation it refuses, and the converter merges a
tree of smaller concatenations back into one. Such a dim's border on each side is one slice of
the input's border run times a constant 0/1 matrix (a FULLY_CONNECTED), concatenated around the
input: as exact, and TFLite-Micro runs it with 16-bit activations. A gather (GATHER_ND, the
converter's form of `x[..., positions]`) runs in 8 bits only there, so a model padding its input
that way heard it in 8 bits however wide the rest of it was (silero-vad reflects 64 audio
samples).

    reflect   (l=2): [x2, x1 | x0 x1 ... xn | xn-1, xn-2]
    replicate (l=2): [x0, x0 | x0 x1 ... xn | xn, xn]
    circular  (l=2): [xn-1, xn | x0 x1 ... xn | x0, x1]
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewrite_calls

__all__ = ["PadAsSlices"]


def _pad_ops():
    import torch

    aten = torch.ops.aten
    ops = {}
    for rank in (1, 2, 3):
        ops[getattr(aten, f"reflection_pad{rank}d").default] = "reflect"
        ops[getattr(aten, f"replication_pad{rank}d").default] = "replicate"
    ops[aten._pad_circular.default] = "circular"
    ops[aten.pad.default] = None  # circular stays aten.pad after ExplicitPad: its mode is an argument
    return ops


def _mode(node, ops) -> str | None:
    if ops[node.target] is not None:
        return ops[node.target]
    mode = call_arguments(node)["mode"]
    return mode if mode in ("reflect", "replicate", "circular") else None


def _border_indices(mode: str, size: int, left: int, right: int) -> tuple[list[int], list[int]]:
    """Which input positions the left and right pads copy, in output order."""
    if mode == "reflect":
        return [left - i for i in range(left)], [size - 2 - i for i in range(right)]
    if mode == "replicate":
        return [0] * left, [size - 1] * right
    return [size - left + i for i in range(left)], list(range(right))  # circular


def _border(program, graph, y, dim: int, positions: list[int], name: str):
    """`y`'s elements at `positions` along `dim` (ascending, descending or repeated, always one
    contiguous run of the input) as one slice times a constant 0/1 matrix: a FULLY_CONNECTED,
    which TFLite-Micro runs with 16-bit activations, where a gather (GATHER_ND) runs in 8 bits
    only. Exact in float; with int8 or int16 activations each output is one input value times a
    weight of 1 (127 at a 1/127 scale). silero-vad reflects 64 audio samples: through an int8
    gather, its 16-bit model heard 8-bit audio (held-out cosine 0.93, not 0.99)."""
    import torch

    aten = torch.ops.aten
    low, high = min(positions), max(positions) + 1
    run = call_with_val(graph, aten.slice.Tensor, y, dim, low, high)
    last = y.meta["val"].dim() - 1
    if dim != last:
        run = call_with_val(graph, aten.transpose.int, run, dim, last)
    shape = list(run.meta["val"].shape)
    select = torch.zeros(high - low, len(positions), dtype=y.meta["val"].dtype)
    for column, position in enumerate(positions):
        select[position - low, column] = 1.0
    matrix = lift_constant(program, f"_{name}", select, y)
    flat = call_with_val(graph, aten.reshape.default, run, [-1, high - low])
    picked = call_with_val(graph, aten.mm.default, flat, matrix)
    border = call_with_val(graph, aten.reshape.default, picked, shape[:-1] + [len(positions)])
    return call_with_val(graph, aten.transpose.int, border, dim, last) if dim != last else border


class PadAsSlices:
    """`max_concat_inputs`: the most inputs the target's concatenation takes (the mcu target passes
    TFLite-Micro's, from its op data); a wider border is written as a product (module docstring)."""

    name = "pad-as-slices"

    def __init__(self, max_concat_inputs: int):
        self.max_concat_inputs = max_concat_inputs

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        ops = _pad_ops()
        found = [n for n in call_functions(exported_program, ops) if _mode(n, ops) and all(p >= 0 for p in n.args[1])]
        modes: dict[str, int] = {}

        def rewrite(program, graph, node):
            mode = _mode(node, ops)
            modes[mode] = modes.get(mode, 0) + 1
            return self._emit(program, graph, node, mode)

        ep, count = rewrite_calls(exported_program, found, rewrite, with_program=True)
        if not count:
            return exported_program, PassResult(self.name, 0, "no reflect/replicate/circular padding in the program")
        what = ", ".join(f"{m} x{c}" for m, c in sorted(modes.items()))
        return ep, PassResult(
            self.name,
            count,
            f"rewrote {count} padding op(s) ({what}) as slices + concatenation (TFLite-Micro has no SELECT kernel)",
            {"modes": modes},
        )

    def _emit(self, program, graph, node, mode):
        import torch

        aten = torch.ops.aten
        y = node.args[0]
        pad = list(node.args[1])
        for pair in range(len(pad) // 2):
            left, right = pad[2 * pair], pad[2 * pair + 1]
            if left == 0 and right == 0:
                continue
            val = y.meta["val"]
            dim = val.dim() - 1 - pair
            size = val.shape[dim]
            lefts, rights = _border_indices(mode, size, left, right)
            if left + right + 1 > self.max_concat_inputs:
                parts = [
                    _border(program, graph, y, dim, positions, f"{node.name}_pad_dim{dim}_{side}")
                    for side, positions in (("left", lefts), ("right", rights))
                    if positions
                ]
                parts.insert(1 if lefts else 0, y)
                y = call_with_val(graph, aten.cat.default, parts, dim)
                continue
            parts = []
            for index in lefts + [None] + rights:
                if index is None:
                    parts.append(y)
                    continue
                part = graph.call_function(aten.slice.Tensor, (y, dim, index, index + 1))
                shape = list(val.shape)
                shape[dim] = 1
                part.meta["val"] = val.new_empty(shape)
                parts.append(part)
            y = graph.call_function(aten.cat.default, (parts, dim))
            shape = list(val.shape)
            shape[dim] = size + left + right
            y.meta["val"] = val.new_empty(shape)
        return y
