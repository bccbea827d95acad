"""Inline `torch.autocast` regions: their ops become ordinary ops of the graph.

torch.export keeps a `with torch.autocast(...)` block as one `higher_order.wrap_with_autocast`
call over a submodule. Models use it to pin a block to float32 (timm's EfficientViT attention,
rotary embeddings in HF transformers: `autocast(device_type, enabled=False)`). A target that
checks op by op sees one op it has no kernel for, though every op inside may be fine.

Inlining is exact when the region does not change the CPU's dtypes: autocast disabled, or
enabled for another device (CUDA autocast leaves CPU ops alone). A region that enables CPU
autocast (bf16) is inlined too, with its ops in float32: the edge targets compute in float32
or int8 and have no autocast; the pass's description names such regions.

`torch.no_grad()` / `torch.enable_grad()` blocks are kept the same way (`wrap_with_set_grad_enabled`,
HF's sinusoidal position embeddings decorate their forward with no_grad: Speech2Text, M2M100,
XGLM). `InlineGradModeRegions` inlines them too: grad mode changes no value, and a region that
disabled it has each output detached, so a training graph still stops gradients there. The mcu
check saw the region as one op and passed it while the converter lowered the index_select inside
to REDUCE_ALL and SELECT_V2, which TFLite-Micro lacks (tests/test_passes_autocast_regions.py).
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import finish

__all__ = ["InlineAutocastRegions", "InlineGradModeRegions"]


def _is_autocast(node) -> bool:
    return node.op == "call_function" and "wrap_with_autocast" in str(getattr(node.target, "__name__", node.target))


def _changes_cpu_dtypes(node) -> bool:
    device, _, enabled = node.args[:3]
    return bool(enabled) and str(device) == "cpu"


def _is_grad_mode(node) -> bool:
    return node.op == "call_function" and "wrap_with_set_grad_enabled" in str(
        getattr(node.target, "__name__", node.target)
    )


def _inline(ep, node, body_node, operands, detach: bool = False) -> None:
    """Replace the region call `node` by a copy of its body's graph (outputs detached if asked)."""
    import torch

    graph, module = ep.graph, ep.graph_module
    body = getattr(module, body_node.target)
    with graph.inserting_before(node):
        outputs = graph.graph_copy(body.graph, dict(zip(body.graph.find_nodes(op="placeholder"), operands)))
        outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        if detach:
            for i, out in enumerate(outputs):
                detached = graph.call_function(torch.ops.aten.detach.default, (out,))
                detached.meta.update(out.meta)
                outputs[i] = detached
    for user in list(node.users):  # getitem(region, i) -> the region's i-th output
        user.replace_all_uses_with(outputs[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)
    if not body_node.users:
        graph.erase_node(body_node)
        delattr(module, body_node.target)


class InlineAutocastRegions:
    name = "inline-autocast-regions"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        if not any(_is_autocast(n) for n in exported_program.graph.nodes):
            return exported_program, PassResult(self.name, 0, "no autocast regions in the program")
        ep = copy_program(exported_program)
        regions, cpu_autocast = 0, 0
        for node in [n for n in ep.graph.nodes if _is_autocast(n)]:
            _inline(ep, node, node.args[4], node.args[5:])
            regions += 1
            cpu_autocast += _changes_cpu_dtypes(node)
        finish(ep)
        note = f"; {cpu_autocast} enabled CPU autocast, now float32" if cpu_autocast else ""
        return ep, PassResult(self.name, regions, f"inlined {regions} torch.autocast region(s){note}")


class InlineGradModeRegions:
    name = "inline-grad-mode-regions"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        if not any(_is_grad_mode(n) for n in exported_program.graph.nodes):
            return exported_program, PassResult(self.name, 0, "no torch.no_grad / enable_grad regions in the program")
        ep = copy_program(exported_program)
        regions = 0
        for node in [n for n in ep.graph.nodes if _is_grad_mode(n)]:
            enabled, body_node, operands = node.args[0], node.args[1], node.args[2:]
            _inline(ep, node, body_node, operands, detach=not enabled)
            regions += 1
        finish(ep)
        return ep, PassResult(self.name, regions, f"inlined {regions} torch.no_grad / enable_grad region(s)")
