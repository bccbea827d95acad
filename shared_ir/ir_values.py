"""The IR's own intermediate values: the ExportedProgram's graph run node by node.

`IntermediateRecorder(program)(*inputs)` returns {node name: numpy value} for every tensor a
call_function node produces (and the user inputs), from torch eager over the captured graph —
the reference every runtime's per-layer numbers are compared against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["IntermediateRecorder", "IRLayer", "ir_layers"]


@dataclass(frozen=True)
class IRLayer:
    """One IR node that yields a tensor: what the report calls a layer."""

    name: str  # fx node name, e.g. "conv2d_1"
    order: int  # position in the graph
    op: str  # "aten.conv2d.default", or "input"
    module: str  # module path, e.g. "features.0.conv" ("" for code in the root module)
    source: str  # "model.py:30 in forward (x = F.relu(self.bn1(self.conv1(image))))"
    shape: tuple[int, ...]

    @property
    def is_input(self) -> bool:
        return self.op == "input"

    def label(self) -> str:
        op = self.op.split(".")[1] if self.op.count(".") >= 2 else self.op
        return f"{self.name} ({self.module}: {op})" if self.module else f"{self.name} ({op})"


def ir_layers(program) -> dict[str, IRLayer]:
    """Every user input and every tensor-valued call_function node of the Program, in graph order."""
    from torch.export.graph_signature import InputKind

    from tpuedge.shared_ir.op_registry import op_key
    from tpuedge.shared_ir.sources import node_source

    ep = program.exported_program
    user_inputs = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    layers = {}
    for order, node in enumerate(ep.graph.nodes):
        val = node.meta.get("val")
        if not (hasattr(val, "shape") and hasattr(val, "dtype")):
            continue
        if not all(isinstance(d, int) or str(d).isdigit() for d in val.shape):
            continue  # dynamic dims: compared by value only when a runtime reports them
        shape = tuple(int(d) for d in val.shape)
        if node.op == "placeholder" and node.name in user_inputs:
            layers[node.name] = IRLayer(node.name, order, "input", "", "model input", shape)
        elif node.op == "call_function":
            stack = node.meta.get("nn_module_stack") or {}
            module = str(list(stack.values())[-1][0]) if stack else ""
            layers[node.name] = IRLayer(node.name, order, op_key(node.target), module, node_source(node) or "", shape)
    return layers


class IntermediateRecorder:
    """Runs the ExportedProgram's graph with an fx Interpreter, keeping every node's value."""

    def __init__(self, program):
        from torch.export.graph_signature import InputKind

        ep = program.exported_program
        self._module = ep.graph_module
        self._layers = ir_layers(program)
        self._slots: list[Any] = []  # a tensor for lifted params/buffers/constants, None for user inputs
        for spec in ep.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                self._slots.append(None)
            elif spec.target in ep.state_dict:
                self._slots.append(ep.state_dict[spec.target])
            else:
                self._slots.append(ep.constants[spec.target])

    @property
    def layers(self) -> dict[str, IRLayer]:
        return self._layers

    def __call__(self, *inputs: np.ndarray) -> dict[str, np.ndarray]:
        import torch
        import torch.fx

        from tpuedge.shared_ir.tensors import to_numpy

        wanted = self._layers
        values: dict[str, np.ndarray] = {}

        class Recorder(torch.fx.Interpreter):
            def run_node(self, node):
                out = super().run_node(node)
                if node.name in wanted and isinstance(out, torch.Tensor):
                    values[node.name] = to_numpy(out).copy()
                return out

        user = iter(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs)
        args = [next(user) if slot is None else slot for slot in self._slots]
        with torch.no_grad():
            Recorder(self._module).run(*args)
        return values
