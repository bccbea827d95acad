"""Make padding explicit: `aten.pad(x, pad, mode, value)` -> the op for that mode.

`F.pad` is captured as one `aten.pad` whatever its mode, but backends differ by mode (TFLite
lowers constant padding to PAD and reflect padding to SELECT/GATHER_ND, which TFLite-Micro
lacks). After this pass the op key says the mode, so capability tables can tell them apart.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import call_arguments, replace_node

__all__ = ["ExplicitPad"]

_RANKED = {"reflect": "reflection_pad{}d", "replicate": "replication_pad{}d", "circular": "_pad_circular"}


class ExplicitPad:
    name = "explicit-pad"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        pads = [n for n in exported_program.graph.nodes if n.op == "call_function" and n.target == aten.pad.default]
        if not pads:
            return exported_program, PassResult(self.name, 0, "no aten.pad in the program")
        ep = copy_program(exported_program)
        names = {n.name for n in pads}
        graph = ep.graph_module.graph
        for node in [n for n in graph.nodes if n.name in names]:
            given = call_arguments(node)
            x, pad, mode, value = given["self"], given["pad"], given["mode"], given["value"]
            if mode == "constant":
                target, args = aten.constant_pad_nd.default, (x, pad, 0.0 if value is None else value)
            elif mode in _RANKED and mode != "circular":
                target = getattr(aten, _RANKED[mode].format(len(pad) // 2)).default
                args = (x, pad)
            else:
                continue  # leave unknown modes as captured; the check reports them
            with graph.inserting_before(node):
                new = graph.call_function(target, args)
            new.meta.update(node.meta)
            replace_node(ep, node, new)  # a pad the program returns: the signature names the new node
        graph.lint()
        ep.graph_module.recompile()
        return ep, PassResult(self.name, len(pads), f"made {len(pads)} aten.pad op(s) explicit by mode")
