"""`aten.embedding(table, ids)` as `table[ids]`: a lookup whose table int8 can hold.

litert-torch lowers an embedding to EMBEDDING_LOOKUP, which ai-edge-quantizer's static int8
recipe leaves in float: a BERT-style encoder's word table (30522 x 384 in MiniLM, half its
parameters) stayed float32 in an "int8" model, which came out at 2.9x its parameter bytes.
Indexing lowers to GATHER_ND, whose table the static recipe stores in int8 (index_select would
too, but its out-of-range fill is a NaN constant the quantizer can't cast). The dynamic
and fp16 recipes are the other way round (they shrink EMBEDDING_LOOKUP, not GATHER_ND), so only
static int8 conversions run this pass (edge/android/android_convert.py). Same numbers: a lookup is a gather.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["EmbeddingAsGather"]


class EmbeddingAsGather:
    name = "embedding-as-gather"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            return call_with_val(graph, aten.index.Tensor, node.args[0], [node.args[1]])  # table[ids]

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.embedding.default}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no embedding in the program")
        return ep, PassResult(self.name, count, f"wrote {count} embedding lookup(s) as gathers (int8 tables)")
