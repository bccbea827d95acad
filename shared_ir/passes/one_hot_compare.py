"""`F.one_hot(ids, n)` as a comparison with 0..n-1: EQUAL and a cast.

    one_hot(ids, n) -> (ids.unsqueeze(-1) == arange(n)).to(int64)

litert-torch decomposes `aten.one_hot` with a data-dependent bounds check (`aten._assert_async`),
which no LiteRT op runs, so android and mcu refused every model that one-hot encodes a token or
class id inside `forward` (tests/test_passes_one_hot.py). The comparison is what one_hot
computes for ids in range; an id out of range gives a row of zeros instead of torch's error.
`n = -1` (the count read off the data) is left for the check to report.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewritten_calls

__all__ = ["OneHotAsCompare"]


class OneHotAsCompare:
    name = "one-hot-as-compare"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(program, graph, node):
            ids = node.args[0]
            classes = int(call_arguments(node)["num_classes"])
            if classes <= 0:
                return None
            positions = lift_constant(
                program, f"_{node.name}_classes", torch.arange(classes, dtype=ids.meta["val"].dtype), ids
            )
            equal = call_with_val(
                graph, aten.eq.Tensor, call_with_val(graph, aten.unsqueeze.default, ids, -1), positions
            )
            return call_with_val(graph, aten.to.dtype, equal, node.meta["val"].dtype)

        return rewritten_calls(
            self.name,
            exported_program,
            call_functions(exported_program, {aten.one_hot.default}),
            rewrite,
            unchanged="no one_hot with a known class count",
            changed="wrote {count} one_hot(s) as a comparison with 0..n-1",
            with_program=True,
        )
