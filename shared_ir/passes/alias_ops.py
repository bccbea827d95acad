"""ATen's alias ops (`torch.multiply`, `torch.divide`, `torch.greater`, `torch.clip`, ...) as
the op they name: the same schema, only the target changes.

torch.export keeps an alias as written (they are CompositeImplicitAutograd, decomposed only by a
full core-ATen decomposition), and mcu's op table lists the canonical ops: HF ConvBERT's
`torch.multiply` was refused on mcu while `*` builds (tests/test_passes_alias_ops.py). Exact.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import finish
from tpuedge.shared_ir.torch_compat import op_schema

__all__ = ["AliasAsCanonicalOp", "ALIASES", "canonical_ops"]

# alias packet -> the op it names; every overload both have is swapped
ALIASES = {
    "multiply": "mul",
    "divide": "div",
    "true_divide": "div",
    "subtract": "sub",
    "greater": "gt",
    "greater_equal": "ge",
    "less": "lt",
    "less_equal": "le",
    "not_equal": "ne",
    "negative": "neg",
    "absolute": "abs",
    "clip": "clamp",
    "concat": "cat",
    "concatenate": "cat",
    "fix": "trunc",
    "arctan": "atan",
    "arctan2": "atan2",
    "arcsin": "asin",
    "arccos": "acos",
    "arctanh": "atanh",
    "moveaxis": "movedim",
    "special_expit": "sigmoid",
    "special_erf": "erf",
    "special_exp2": "exp2",
}


def canonical_ops() -> dict[Any, Any]:
    """alias OpOverload -> canonical OpOverload, where both schemas take the same arguments."""
    import torch

    aten = torch.ops.aten
    table = {}
    for alias, name in ALIASES.items():
        packet, canonical = getattr(aten, alias, None), getattr(aten, name, None)
        if packet is None or canonical is None:
            continue
        for overload in packet.overloads():
            if overload.startswith("out") or overload.endswith("_out") or overload not in canonical.overloads():
                continue
            a, c = getattr(packet, overload), getattr(canonical, overload)
            if [(x.name, str(x.type)) for x in op_schema(a).arguments] == [
                (x.name, str(x.type)) for x in op_schema(c).arguments
            ]:
                table[a] = c
    return table


class AliasAsCanonicalOp:
    name = "alias-as-canonical-op"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        table = canonical_ops()
        names = {n.name for n in exported_program.graph.nodes if n.op == "call_function" and n.target in table}
        if not names:
            return exported_program, PassResult(self.name, 0, "no alias op")
        ep = copy_program(exported_program)
        for node in ep.graph.nodes:
            if node.name in names:
                node.target = table[node.target]
        return finish(ep), PassResult(self.name, len(names), f"wrote {len(names)} alias op(s) as the op each names")
