"""What the TFLite converter removes before TFLite-Micro sees the model, as `check` must see it.

Constant folding: an op whose inputs are all weights or constants (an embedding of fixed
position ids, a transposed weight) is computed by the converter; no kernel is needed for it.

Fused activations:
A ReLU6 (or hardtanh/clamp to 0..6 or -1..1, or a ReLU) right after a conv, linear, add, sub,
mul or batch norm becomes that op's fused activation: no RELU6 op is left in the model. On its
own, RELU6 stays float in a strict-int8 build (ai-edge-quantizer has no int8 recipe for it), so
`check --target mcu` judges the activations it would fuse by their producer, not as ops.
Measured by tests/test_mcu_op_truth.py (the fused probes).
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.torch_compat import is_op_overload, op_name_parts

__all__ = ["without_fused_activations", "without_constant_ops", "converter_view"]

# (producer op names that take a fused activation), each an aten op name without overload
_FUSING_PRODUCERS = frozenset(
    {
        "conv1d",
        "conv2d",
        "convolution",
        "linear",
        "addmm",
        "mm",
        "add",
        "add_",
        "sub",
        "mul",
        "batch_norm",
        "_native_batch_norm_legit_no_training",
    }
)
_FUSED_RANGES = {(0.0, 6.0), (-1.0, 1.0)}  # ReLU6 and RELU_N1_TO_1


def _name(node) -> str:
    target = node.target
    return op_name_parts(target)[1] if is_op_overload(target) else getattr(target, "__name__", "")


def _fusing_producers(node) -> frozenset:
    """The producers `node` fuses into (empty: it is no fusable activation)."""
    name = _name(node)
    if name in ("relu", "relu_", "relu6"):
        return _FUSING_PRODUCERS
    if name in ("hardtanh", "hardtanh_", "clamp"):
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", node.kwargs.get("min", -1.0))
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", node.kwargs.get("max", 1.0))
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            return _FUSING_PRODUCERS if (float(low), float(high)) in _FUSED_RANGES else frozenset()
    return frozenset()


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
        if node.op != "call_function":
            return False
        producers = _fusing_producers(node)
        producer, direct = _producer(node)
        return producer is not None and _name(producer) in producers and len(direct.users) == 1

    if not any(fused(n) for n in exported_program.graph.nodes):
        return exported_program
    ep = copy_program(exported_program)
    graph = ep.graph_module.graph
    for node in [n for n in graph.nodes if fused(n)]:
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
    return ep


def without_constant_ops(exported_program: Any) -> Any:
    """A copy where every op computed only from weights/constants is one opaque constant (get_attr)."""
    from tpuedge.shared_ir.passes import copy_program

    def constant_placeholders(ep) -> set[str]:
        sig = ep.graph_signature
        names = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers)
        return names | set(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})

    def foldable(ep) -> list:
        constants, folded = constant_placeholders(ep), []
        known = set()
        for node in ep.graph.nodes:
            if node.op == "placeholder" and node.name in constants or node.op == "get_attr":
                known.add(node)
            elif node.op == "call_function" and node.all_input_nodes and all(n in known for n in node.all_input_nodes):
                known.add(node)
                folded.append(node)
        return folded

    if not foldable(exported_program):
        return exported_program
    ep = copy_program(exported_program)
    graph = ep.graph_module.graph
    nodes = foldable(ep)
    for node in reversed(nodes):
        if any(user not in nodes for user in node.users):
            import torch

            name = f"_converter_folded_{node.name}"
            ep.graph_module.register_buffer(name, torch.empty(0))  # stands for the folded value
            with graph.inserting_before(node):
                constant = graph.get_attr(name)
            node.replace_all_uses_with(constant)
    for node in reversed(nodes):
        graph.erase_node(node)
    return ep


def converter_view(exported_program: Any) -> Any:
    """The program as the converter leaves it for TFLite-Micro: constants folded, activations fused."""
    return without_fused_activations(without_constant_ops(exported_program))
