"""A gather from a constant whose entries are all equal becomes a constant of the index's shape.

HF RoBERTa (and XLM-R, CamemBERT, Longformer) reads its token type ids as
`torch.gather(buffered_token_type_ids, 1, position_ids)`: a buffer of zeros, gathered at
positions computed from the input. `fold-constants` cannot fold it (the index reads the
input), and TFLite-Micro has no kernel for an element-wise gather, so every such encoder was
refused on mcu. Whatever the index, the result is the one value the source holds everywhere:
a constant of the index's shape (the output's), exact. Runs after `fold-constants`, which
turns the buffer's expand into the constant this pass reads.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import constant_values, lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_functions, rewritten_calls

__all__ = ["UniformGather"]


class UniformGather:
    name = "uniform-gather"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        values = constant_values(exported_program)

        def uniform(node) -> Any:
            source = node.args[0]
            value = values.get(getattr(source, "name", None))
            if value is None or value.numel() == 0 or not bool((value == value.reshape(-1)[0]).all()):
                return None
            return value.reshape(-1)[0]

        found = [n for n in call_functions(exported_program, {aten.gather.default}) if uniform(n) is not None]
        entries = {n.name: uniform(n) for n in found}

        def rewrite(program, graph, node):
            out = node.meta["val"]
            return lift_constant(
                program,
                f"_uniform_{node.name}",
                torch.full(tuple(out.shape), entries[node.name].item(), dtype=out.dtype),
                node,
            )

        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            with_program=True,
            unchanged="no gather from a constant whose entries are all equal",
            changed="replaced {count} gather(s) from a uniform constant by a constant of the index's shape",
        )
