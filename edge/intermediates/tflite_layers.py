"""A .tflite run in LiteRT or TFLite-Micro with every intermediate tensor kept, its tensors
placed on IR nodes (`tflite_graph.match_tensors`, settled by value in `tflite_matches`) and
read back dequantized in IR layout.

- LiteRT: the builtin kernels, all tensors preserved (a delegate would hide the intermediates
  inside its partition).
- TFLite-Micro: the real TFLM interpreter with `kPreserveAllTensors`.
"""

from __future__ import annotations

import numpy as np

from tpuedge.shared_ir.ir_values import IRLayer
from tpuedge.shared_ir.layouts import layout_permutation

__all__ = ["TfliteLayerSource"]


class TfliteLayerSource:
    """LiteRT or TFLite-Micro with every intermediate tensor kept."""

    def __init__(self, model_bytes: bytes, program, layers: dict[str, IRLayer], *, micro: bool):
        from tpuedge.edge.intermediates.tflite_graph import match_tensors, read_graph

        self._graph = read_graph(model_bytes)
        self._program, self._layers = program, layers
        self._candidates = match_tensors(self._graph, program, layers)
        self._matches = []
        self._micro = micro
        self._input_perms = []
        for tensor_index, spec in zip(self._graph.inputs, program.inputs):
            perm = layout_permutation(spec.shape, self._graph.tensors[tensor_index].shape)
            self._input_perms.append(perm or ())
        if micro:
            from tflite_micro import runtime

            tensor_bytes = sum(
                int(np.prod(t.shape or (1,))) * np.dtype(t.dtype if t.dtype != "unknown" else "int32").itemsize
                for t in self._graph.tensors
            )
            self._interpreter = runtime.Interpreter.from_bytes(
                model_bytes,
                arena_size=2 * tensor_bytes + (1 << 20),
                intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors,
            )
        else:
            from tpuedge.edge.litert.litert_runtime import preserving_interpreter

            self._model_bytes = model_bytes  # alive while the interpreter reads it
            self._interpreter = preserving_interpreter(model_bytes)

    @property
    def graph(self):
        return self._graph

    @property
    def candidates(self):
        """`tflite_graph.TensorCandidates` of every runtime tensor that could be placed."""
        return self._candidates

    def names(self) -> dict[str, str]:
        return {m.node: self._graph.tensors[m.tensor].name or f"tensor {m.tensor}" for m in self._matches}

    def counterparts(self) -> set[str]:
        from tpuedge.edge.intermediates.tflite_graph import counterpart_nodes

        return counterpart_nodes(self._graph, self._program, self._layers)

    def _encode(self, tensor, value: np.ndarray) -> np.ndarray:
        if tensor.scale.size and tensor.dtype in ("int8", "uint8", "int16"):
            from tpuedge.quantize import affine

            # each runtime rounds ties its own way: TFLite-Micro away from zero, LiteRT to even
            ties = "away" if self._micro else "even"
            return affine.quantize(
                value, tensor.scale, tensor.zero_point, tensor.dtype, tensor.quantized_dimension, ties
            )
        return value.astype(tensor.dtype)

    def tensor_values(self, inputs: list[np.ndarray], tensors: list[int]) -> dict[int, np.ndarray]:
        """Dequantized values of runtime tensors `tensors` on one sample (IR-layout inputs)."""
        from tpuedge.edge.intermediates.tflite_graph import dequantize

        it = self._interpreter
        for position, (tensor_index, value, perm) in enumerate(zip(self._graph.inputs, inputs, self._input_perms)):
            tensor = self._graph.tensors[tensor_index]
            raw = np.ascontiguousarray(self._encode(tensor, np.transpose(value, perm) if perm else value))
            if self._micro:
                it.set_input(raw, position)
            else:
                it.set_tensor(tensor_index, raw)
        it.invoke()
        out = {}
        for index in tensors:
            tensor = self._graph.tensors[index]
            raw = it.GetTensor(index, 0)["tensor_data"] if self._micro else it.get_tensor(index)
            out[index] = dequantize(tensor, np.asarray(raw).reshape(tensor.shape))
        return out

    def prepare(self, reference: dict[str, np.ndarray], inputs: list[np.ndarray]) -> None:
        """Settle which IR node each runtime tensor holds, by value on this one sample."""
        from tpuedge.edge.intermediates.tflite_matches import resolve_matches

        runtime = self.tensor_values(inputs, [c.tensor for c in self._candidates])
        self._matches = resolve_matches(self._candidates, reference, runtime, self._layers)

    def values(self, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        from tpuedge.edge.intermediates.tflite_graph import to_ir_layout

        got = self.tensor_values(inputs, [m.tensor for m in self._matches])
        return {
            m.node: to_ir_layout(got[m.tensor], m.perm, self._layers[m.node].shape) / m.scale for m in self._matches
        }
