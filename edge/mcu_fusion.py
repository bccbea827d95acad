"""The activations the TFLite converter fuses into the op before them, as `check` must see them.

A ReLU6 (or hardtanh/clamp to 0..6 or -1..1, or a ReLU) right after a conv, linear, add, sub,
mul or batch norm becomes that op's fused activation: no RELU6 op is left in the model. On its
own, RELU6 stays float in a strict-int8 build (ai-edge-quantizer has no int8 recipe for it), so
`check --target mcu` judges the activations it would fuse by their producer, not as ops.
Measured by tests/test_mcu_op_truth.py (the fused probes).
"""

from __future__ import annotations

from typing import Any

__all__ = ["without_fused_activations"]

# (producer op names that take a fused activation), each an aten op name without overload
_FUSING_PRODUCERS = frozenset(
    {
        "conv1d", "conv2d", "convolution", "linear", "addmm", "mm", "add", "add_", "sub", "mul",
        "batch_norm", "_native_batch_norm_legit_no_training",
    }
)
_FUSED_RANGES = {(0.0, 6.0), (-1.0, 1.0)}


def _name(node) -> str:
    target = node.target
    return getattr(target, "_opname", getattr(target, "__name__", ""))


def _fusable_activation(node) -> bool:
    name = _name(node)
    if name in ("relu", "relu_", "relu6"):
        return True
    if name in ("hardtanh", "hardtanh_", "clamp"):
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", node.kwargs.get("min", -1.0))
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", node.kwargs.get("max", 1.0))
        return isinstance(low, (int, float)) and isinstance(high, (int, float)) and (float(low), float(high)) in _FUSED_RANGES
    return False


def _producer(node):
    """The op computing `node`'s input, looking through a tuple getitem (batch norm's output)."""
    source = node.args[0] if node.args else None
    if getattr(source, "op", None) != "call_function":
        return None, source
    if _name(source) == "getitem" and getattr(source.args[0], "op", None) == "call_function":
        return source.args[0], source
    return source, source


def without_fused_activations(exported_program: Any) -> Any:
    """A copy of the program without the activations the converter will fuse (for checking only)."""
    from tpuedge.shared_ir.passes import copy_program

    def fused(node) -> bool:
        if node.op != "call_function" or not _fusable_activation(node):
            return False
        producer, direct = _producer(node)
        return producer is not None and _name(producer) in _FUSING_PRODUCERS and len(direct.users) == 1

    if not any(fused(n) for n in exported_program.graph.nodes):
        return exported_program
    ep = copy_program(exported_program)
    graph = ep.graph_module.graph
    for node in [n for n in graph.nodes if fused(n)]:
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
    return ep
