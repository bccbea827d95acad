"""`repeat_interleave` by a constant count as one gather of constant positions.

    x.repeat_interleave(r, dim)  ->  x[..., positions]      positions = [0]*r + [1]*r + ... along dim

timm's GCViT repeats its global query over windows this way, and TFLite-Micro has no kernel for
it: the check refused the model on mcu at the op. A gather moves values and computes nothing:
exact in float and int8 (the same form as `pad-as-slices` uses for wide pads). Repeats given as a
tensor, or over the flattened tensor (no dim), are left for the check to report.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, rewritten_calls

__all__ = ["RepeatInterleaveAsGather"]


class RepeatInterleaveAsGather:
    name = "repeat-interleave-as-gather"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(program, graph, node):
            given = call_arguments(node)
            x, repeats, dim = given["self"], given["repeats"], given["dim"]
            val = x.meta["val"]
            if not isinstance(repeats, int) or dim is None:
                return None
            dim = dim % val.dim()
            size = val.shape[dim]
            if not isinstance(size, int):
                return None
            positions = torch.arange(size, dtype=torch.int64).repeat_interleave(repeats)
            index = lift_constant(program, f"_{node.name}_positions", positions, x)
            return call_with_val(graph, aten.index.Tensor, x, [None] * dim + [index])

        found = call_functions(exported_program, {aten.repeat_interleave.self_int})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            with_program=True,
            unchanged="no repeat_interleave by a constant count along a dim",
            changed="wrote {count} repeat_interleave(s) as a gather of constant positions",
        )
