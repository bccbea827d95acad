"""`linear(flatten(x))` over an image tensor reads it in NHWC order, the weight permuted to match.

Edge converters run convolutions in NHWC. A model that flattens a [N, C, H, W] feature map
into a Linear reads it in C, H, W order, so the converter puts a TRANSPOSE (NHWC -> NCHW)
before the flatten. This pass makes the flatten read [N, H, W, C] (a permute the converter
cancels against its own layout transpose) and permutes the Linear's weight columns from
(C, H, W) to (H, W, C) order: the same products, summed in the same groups, so the output is
the same up to float summation order. Only a weight used by that one Linear is permuted (the
permuted copy replaces it in this program; the original program keeps its own).
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import SOURCE_META, finish

__all__ = ["FlattenAsNHWC"]


def _flatten_source(flat) -> Any | None:
    """The rank-4 input x of `flat` when flat = x.flatten(1) / x.reshape(N, -1) with H*W > 1."""
    import torch

    aten = torch.ops.aten
    if flat.op != "call_function" or not flat.args:
        return None
    x = flat.args[0]
    val, out = getattr(x, "meta", {}).get("val"), flat.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor):  # e.g. an LSTM's (out, (h, c))
        return None
    if val.dim() != 4 or out.dim() != 2 or val.shape[2] * val.shape[3] == 1:
        return None
    if x.op == "call_function" and x.target == aten.permute.default and list(x.args[1]) == [0, 2, 3, 1]:
        return None  # reads NHWC already (this pass ran, or the model permutes itself)
    if flat.target == aten.flatten.using_ints and tuple(flat.args[1:3]) in ((1,), (1, -1), (1, 3)):
        return x
    if (
        flat.target in (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
        and out.shape[0] == val.shape[0]
    ):
        return x
    return None


def _weight_target(ep, node) -> str | None:
    """The state_dict/constants key of a parameter or constant placeholder with one user."""
    if node.op != "placeholder" or len(node.users) != 1:
        return None
    for spec in ep.graph_signature.input_specs:
        if spec.arg.name == node.name and spec.target is not None:
            return spec.target
    return None


class FlattenAsNHWC:
    name = "flatten-as-nhwc"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        candidates = [
            n.name
            for n in exported_program.graph.nodes
            if n.op == "call_function"
            and n.target == aten.linear.default
            and _flatten_source(n.args[0]) is not None
            and len(n.args[0].users) == 1
            and _weight_target(exported_program, n.args[1]) is not None
        ]
        if not candidates:
            return exported_program, PassResult(self.name, 0, "no flatten of an image tensor into a Linear")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        for linear in [n for n in graph.nodes if n.name in candidates]:
            flat, weight = linear.args[0], linear.args[1]
            x = _flatten_source(flat)
            n, c, h, w = x.meta["val"].shape
            with graph.inserting_before(flat):
                nhwc = graph.call_function(aten.permute.default, (x, [0, 2, 3, 1]))
            nhwc.meta.update({k: flat.meta[k] for k in SOURCE_META if k in flat.meta})
            nhwc.meta["val"] = x.meta["val"].permute(0, 2, 3, 1)
            flat.replace_input_with(x, nhwc)
            target = _weight_target(ep, weight)
            store = ep.state_dict if target in ep.state_dict else ep.constants
            old = store[target]
            new = old.detach().reshape(old.shape[0], c, h, w).permute(0, 2, 3, 1).reshape(old.shape).contiguous()
            store[target] = (
                torch.nn.Parameter(new, requires_grad=old.requires_grad) if isinstance(old, torch.nn.Parameter) else new
            )
        finish(ep)
        return ep, PassResult(
            self.name,
            len(candidates),
            f"{len(candidates)} flatten(s) into a Linear read NHWC, weight columns permuted to match (no TRANSPOSE on device)",
        )
