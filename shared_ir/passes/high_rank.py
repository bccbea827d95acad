"""Ops above 5-D computed at a lower rank, where LiteRT's converter or TFLite-Micro stop at 5-D.

Measured (tests/test_passes_high_rank.py builds each):
- TFLite-Micro's TRANSPOSE refuses a 6-D tensor (its kernel fails to prepare). A window
  partition (Swin's `view(B, h, w, h2, w2, C).permute(0, 1, 3, 2, 4, 5)`, or HF's
  `.transpose(2, 3)` of the same view) moves only some axes:
  `PermuteAtMost5D` drops size-1 axes and merges input axes that stay adjacent and in order
  (here 0-1 and 4-5), so the same data movement is a 4-D transpose between two reshapes. Where
  that still leaves more than 5 axes (timm's Hiera unrolls its tokens with 6-D and 7-D
  permutes), the permutation is done as a few swaps of two axes, each a 5-D transpose of
  (before, a, between, b, after) between reshapes: at most rank - 1 of them.
- litert-torch's converter fails to legalize a 6-D `tfl.maximum`, `tfl.minimum` or `tfl.pow`
  against a scalar: relu, relu6/hardtanh, clamp and `x ** k` on a 6-D tensor stop android and
  mcu builds alike. Elementwise, they give the same values on the tensor flattened to 1-D:
  `ElementwiseAtMost5D` computes them there and reshapes back.
Both change only ops above 5-D (a program without any is returned as it is) and are exact.
"""

from __future__ import annotations

import math
from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls, static_shapes

__all__ = ["PermuteAtMost5D", "ElementwiseAtMost5D", "MAX_RANK", "reduced_permutation"]

MAX_RANK = 5


def _rank(node) -> int:
    val = node.meta.get("val")
    return len(getattr(val, "shape", ()))


def reduced_permutation(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input shape, permutation) of the smallest transpose that moves the data as
    `permute(perm)` does on `shape`: size-1 axes dropped, runs of input axes that stay adjacent
    and in the same order merged into one."""
    order = [axis for axis in perm if shape[axis] != 1]  # the output's axes, in input numbering
    runs: list[list[int]] = []
    for axis in order:
        if runs and axis == runs[-1][-1] + 1:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    by_first = sorted(runs, key=lambda run: run[0])  # the merged axes in input order
    merged_shape = tuple(math.prod(int(shape[a]) for a in run) for run in by_first)
    position = {run[0]: i for i, run in enumerate(by_first)}
    return merged_shape, tuple(position[run[0]] for run in runs)


def _permutation(node, rank: int) -> tuple[int, ...]:
    """The axis order of a permute, or of a transpose (HF Swin's `.transpose(2, 3)` on 6-D)."""
    import torch

    if node.target == torch.ops.aten.transpose.int:
        first, second = (int(d) % rank for d in node.args[1:3])
        order = list(range(rank))
        order[first], order[second] = second, first
        return tuple(order)
    return tuple(int(p) % rank for p in node.args[1])


class PermuteAtMost5D:
    name = "permute-at-most-5d"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        found = [
            n
            for n in call_functions(exported_program, {aten.permute.default, aten.transpose.int})
            if _rank(n) > MAX_RANK
        ]

        def rewrite(graph, node):
            source = node.args[0]
            if not static_shapes(source, node):
                return None
            shape = tuple(int(d) for d in source.meta["val"].shape)
            perm = _permutation(node, len(shape))
            merged, reduced = reduced_permutation(shape, perm)
            out_shape = [int(d) for d in node.meta["val"].shape]
            if len(merged) > MAX_RANK:
                flat = call_with_val(graph, aten.reshape.default, source, list(merged))
                return call_with_val(
                    graph, aten.reshape.default, _by_swaps(graph, aten, flat, merged, reduced), out_shape
                )
            if reduced == tuple(range(len(reduced))):  # only size-1 axes moved: no data moves
                return call_with_val(graph, aten.reshape.default, source, out_shape)
            # reshape, not view: the source may itself be a permute's strided output, which eager
            # torch (Program.run) copies; the converter has no strides and sees a RESHAPE either way
            flat = call_with_val(graph, aten.reshape.default, source, list(merged))
            moved = call_with_val(graph, aten.permute.default, flat, list(reduced))
            return call_with_val(graph, aten.reshape.default, moved, out_shape)

        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, f"no permute above {MAX_RANK}-D in the program")
        return ep, PassResult(
            self.name, count, f"did {count} permute(s) above {MAX_RANK}-D as transposes of at most {MAX_RANK} axes"
        )


def _by_swaps(graph, aten, x, shape: tuple[int, ...], perm: tuple[int, ...]):
    """permute(x, perm) as swaps of two axes, each a 5-D transpose (before, a, between, b,
    after) between reshapes: position k gets its axis by one swap, k = 0, 1, ..."""
    current, sizes = list(range(len(shape))), list(shape)  # current[k]: the input axis now at k
    for k, wanted in enumerate(perm):
        j = current.index(wanted)
        if j == k:
            continue
        five = [math.prod(sizes[:k]), sizes[k], math.prod(sizes[k + 1 : j]), sizes[j], math.prod(sizes[j + 1 :])]
        moved = call_with_val(
            graph, aten.permute.default, call_with_val(graph, aten.reshape.default, x, five), [0, 3, 2, 1, 4]
        )
        current[k], current[j], sizes[k], sizes[j] = current[j], current[k], sizes[j], sizes[k]
        x = call_with_val(graph, aten.reshape.default, moved, list(sizes))
    return x


def _elementwise_targets():
    import torch

    aten = torch.ops.aten
    return {
        aten.relu.default,
        aten.relu6.default,
        aten.hardtanh.default,
        aten.clamp.default,
        aten.clamp.Tensor,
        aten.pow.Tensor_Scalar,
    }


class ElementwiseAtMost5D:
    name = "elementwise-at-most-5d"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def flat_operands(node) -> bool:  # every tensor operand of the op's shape (no broadcast)
            shape = node.meta["val"].shape
            tensors = [a for a in node.args if isinstance(a, torch.fx.Node)]
            return all(tuple(a.meta["val"].shape) == tuple(shape) for a in tensors)

        found = [
            n
            for n in call_functions(exported_program, _elementwise_targets())
            if _rank(n) > MAX_RANK and not n.kwargs and flat_operands(n)
        ]

        def rewrite(graph, node):
            shape = [int(d) for d in node.meta["val"].shape]
            args = [
                call_with_val(graph, aten.reshape.default, a, [-1]) if isinstance(a, torch.fx.Node) else a
                for a in node.args
            ]
            out = call_with_val(graph, node.target, *args)
            return call_with_val(graph, aten.reshape.default, out, shape)

        ep, count = rewrite_calls(exported_program, found, rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, f"no clamp-like op above {MAX_RANK}-D")
        return ep, PassResult(self.name, count, f"computed {count} elementwise op(s) above {MAX_RANK}-D on a 1-D view")
