"""Sorting as TOPK_V2: `sort`, `argsort` and a `topk` whose values alone are read.

litert-torch lowers `aten.sort` and a `topk` whose indices are dropped to STABLEHLO_SORT, which
the LiteRT interpreter cannot load ("Didn't find op for builtin opcode 'STABLEHLO_SORT'"), and
`argsort` fails in its converter (an i64 comparator): `check --target android` passed and the
build stopped (tests/test_passes_sort_topk.py). A `topk` whose indices are read converts to
TOPK_V2 and runs, so each becomes that: the indices of `topk(x, k, dim, largest)` (k = the dim's
size for a sort, largest = descending) and the values gathered at them. The values are exact;
among equal values the indices may come in another order than torch's (TOPK_V2 promises none,
so a `stable=True` sort of ties is not kept stable).
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls, static_shapes

__all__ = ["SortAsTopk"]


def _read(node, index: int) -> bool:
    return any(u.target is operator.getitem and u.args[1] == index and u.users for u in node.users)


class SortAsTopk:
    name = "sort-as-topk"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def options(node) -> tuple[int, bool, int | None]:
            """(dim, largest first, k or None for the whole dim)."""
            given = dict(node.kwargs)
            if node.target == aten.topk.default:
                given.update(zip(("k", "dim", "largest"), node.args[1:4]))
                return given.get("dim", -1), given.get("largest", True), given["k"]
            names = ("stable", "dim", "descending") if node.target == aten.sort.stable else ("dim", "descending")
            given.update(zip(names, node.args[1:]))
            return given.get("dim", -1), given.get("descending", False), None

        def rewrite(graph, node):
            x = node.args[0]
            if not static_shapes(x) or x.meta["val"].dim() == 0:
                return None
            dim, largest, k = options(node)
            if node.target == aten.topk.default and not (_read(node, 0) and not _read(node, 1)):
                return None  # with its indices read it converts to TOPK_V2 as it is
            dim %= x.meta["val"].dim()
            k = x.meta["val"].shape[dim] if k is None else k
            found = call_with_val(graph, aten.topk.default, x, k, dim, largest, True)
            indices = graph.call_function(operator.getitem, (found, 1))
            indices.meta["val"] = found.meta["val"][1]
            if node.target in (aten.argsort.default, aten.argsort.stable):
                return indices
            return call_with_val(graph, aten.gather.default, x, dim, indices), indices

        found = call_functions(
            exported_program,
            {aten.sort.default, aten.sort.stable, aten.argsort.default, aten.argsort.stable, aten.topk.default},
        )
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no sort, argsort or values-only topk",
            changed="wrote {count} sort(s) / top-k(s) as TOPK_V2 indices and a gather",
        )
