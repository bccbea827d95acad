"""Reflect, replicate and circular padding as slices + one concatenation per padded dim.

TFLite lowers `reflection_padNd`/`replication_padNd` to ABS/SUB/LESS/SELECT/GATHER_ND, and
TFLite-Micro has no SELECT kernel. The same values are the input's own border rows and
columns, so each padded dim becomes a concatenation of one-wide slices (STRIDED_SLICE) around
the input (CONCATENATION): exact in float and in int8 (slices and concatenation move values,
they compute nothing). Runs after `ExplicitPad`, which names the mode in the op.

A dim padded by more than 9 positions in all would need a concatenation of more than 10
inputs, which TFLite-Micro's CONCATENATION refuses (`kMaxInputNum`), and the converter merges a
tree of smaller concatenations back into one. Such a dim is one GATHER (`index_select`) of the
input along it (`x[..., positions]`), with the output's source positions as a constant: as
exact, one op (silero-vad reflects 64 samples each side).

    reflect   (l=2): [x2, x1 | x0 x1 ... xn | xn-1, xn-2]
    replicate (l=2): [x0, x0 | x0 x1 ... xn | xn, xn]
    circular  (l=2): [xn-1, xn | x0 x1 ... xn | x0, x1]
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["PadAsSlices", "MAX_CONCAT_INPUTS"]

MAX_CONCAT_INPUTS = 10  # TFLite-Micro's kMaxInputNum (kernels/concatenation.cc)


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
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    return mode if mode in ("reflect", "replicate", "circular") else None


def _border_indices(mode: str, size: int, left: int, right: int) -> tuple[list[int], list[int]]:
    """Which input positions the left and right pads copy, in output order."""
    if mode == "reflect":
        return [left - i for i in range(left)], [size - 2 - i for i in range(right)]
    if mode == "replicate":
        return [0] * left, [size - 1] * right
    return [size - left + i for i in range(left)], list(range(right))  # circular


class PadAsSlices:
    name = "pad-as-slices"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        ops = _pad_ops()
        found = [
            n for n in call_functions(exported_program, ops) if _mode(n, ops) and all(p >= 0 for p in n.args[1])
        ]
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

    @staticmethod
    def _emit(program, graph, node, mode):
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
            if left + right + 1 > MAX_CONCAT_INPUTS:
                positions = torch.tensor(lefts + list(range(size)) + rights, dtype=torch.int64)
                index = lift_constant(program, f"_{node.name}_pad_dim{dim}", positions, y)
                y = call_with_val(graph, aten.index.Tensor, y, [None] * dim + [index])
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
