"""Trained activation ranges (keyed by IR node) onto a float .tflite's tensors (keyed by name).

The flatbuffer keeps no IR node names, so each activation tensor is placed on the IR node it
holds the way per-layer verify places them (`edge/intermediates/tflite_graph.py`: module scopes and shapes,
settled by value on one sample), and takes that node's range: its own when the node is a
quantization point, else the range of the point whose int8 grid it keeps (a reshape, a max
pool). The one sample run is drawn inside the trained input ranges; its values only settle
which node a tensor holds, no range is measured from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = [
    "TensorRanges",
    "tensor_ranges",
    "require_complete",
    "trained_range_samples",
    "ranges_line",
    "TRAINED_RANGES_SOURCE",
]

TRAINED_RANGES_SOURCE = "none: every activation range comes from training (the Program's activation_ranges)"


# builtins whose output holds its input's values rearranged (not verify's data-movement set: a
# CAST there changes the dtype, and a bool or int tensor takes no range) ...
_RESHAPING_OPS = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE"}
# ... and those that hold a selection of them, or them padded with zeros (a strided conv's
# explicit PAD: 0 is on every grid, int8_affine widens each range to hold it): all keep the
# input's int8 grid
_SAME_GRID_OPS = _RESHAPING_OPS | {
    "SLICE",
    "STRIDED_SLICE",
    "GATHER",
    "SPLIT",
    "SPLIT_V",
    "UNPACK",
    "MAX_POOL_2D",
    "PAD",
}


@dataclass(frozen=True)
class TensorRanges:
    ranges: dict[str, tuple[float, float]]  # tflite tensor name -> (min, max)
    unplaced: tuple[str, ...]  # float activation tensors no trained range reached

    def summary(self) -> dict:
        return {"tensors_with_trained_ranges": len(self.ranges), "tensors_without": list(self.unplaced)}


def tensor_ranges(float_tflite: bytes, program, ranges) -> TensorRanges:
    """Every activation tensor of `float_tflite` that holds a node with a trained range."""
    from tpuedge.quantize.activation_ranges import quant_points
    from tpuedge.shared_ir.ir_values import IntermediateRecorder, ir_layers
    from tpuedge.edge.intermediates.tflite_layers import TfliteLayerSource
    from tpuedge.edge.intermediates.tflite_matches import best_candidates

    layers = ir_layers(program)
    source = TfliteLayerSource(float_tflite, program, layers, micro=False)
    # one sample inside the trained input ranges: its values only settle which node a tensor holds
    rng = np.random.default_rng(0)
    sample = [
        rng.uniform(*ranges.ranges.get(s.name, (-1.0, 1.0)), size=tuple(s.shape)).astype(s.dtype)
        for s in program.inputs
    ]
    reference = IntermediateRecorder(program)(*sample)
    runtime = source.tensor_values(sample, [c.tensor for c in source.candidates])
    placed = best_candidates(source.candidates, reference, runtime)
    graph = source.graph
    found: dict[str, tuple[float, float]] = {}
    # the build's passes add nodes (a layout permute before a flatten): which point's grid such
    # a node keeps is read from the program built, the ranges from training
    inherits = quant_points(program).inherits
    for tensor, (node, _) in placed.items():
        trained = ranges.ranges.get(inherits.get(node, node))
        if trained is not None:
            found[graph.tensors[tensor].name] = trained
    # a tensor only cut or moved out of one the converter split up (an unrolled sequence's time
    # steps) keeps its input's int8 grid, as its IR node keeps its source's
    for op in graph.ops:
        first_input = graph.tensors[op.inputs[0]].name if op.inputs else None
        if op.name in _SAME_GRID_OPS and first_input in found:
            for out in op.outputs:
                found.setdefault(graph.tensors[out].name, found[first_input])
    for op in reversed(graph.ops):  # and a tensor only reshaped into a placed one holds its values
        target = graph.tensors[op.outputs[0]].name if op.outputs else None
        if op.name in _RESHAPING_OPS and target in found and op.inputs:
            found.setdefault(graph.tensors[op.inputs[0]].name, found[target])
    produced = {t for op in graph.ops for t in op.outputs} | set(graph.inputs)
    unplaced = tuple(
        t.name for t in graph.tensors if t.index in produced and t.dtype == "float32" and t.name not in found
    )
    return TensorRanges(found, unplaced)


def require_complete(result: TensorRanges, program_name: str) -> None:
    """A strict int8 graph must take every range from training: an unplaced tensor is an error."""
    if result.unplaced:
        raise UserError(
            f"{program_name} carries trained activation ranges, but {len(result.unplaced)} activation tensor(s) of its "
            f"int8 graph hold no IR node with a range ({', '.join(result.unplaced[:5])}"
            f"{', ...' if len(result.unplaced) > 5 else ''}), so the build can't use the trained ranges alone. "
            "Pass --calibration data to set every range by calibration instead, or report the model."
        )


def trained_range_samples(program, evaluation, target: str) -> list:
    """A program with trained ranges needs no calibration, but its build still runs real inputs
    (the accuracy budget, mcu's arena): the --eval inputs, which set no range."""
    if evaluation is None:
        raise UserError(
            f"{program.name} carries trained activation ranges, so the {target} int8 build needs no --calibration, but it "
            "still measures the accuracy budget on real inputs: pass --eval file.py:function returning (inputs, labels) "
            "or an .npz of inputs keyed by input name (in Python: eval=(inputs, labels)). No range is taken from them."
        )
    return evaluation.samples


def ranges_line(recipe: dict) -> str | None:
    """The build report's line for a model whose activation ranges came from training."""
    entry = recipe.get("activation_ranges")
    if not entry:
        return None
    return (
        f"  activation ranges: trained ({entry['source']}), {entry['tensors_with_trained_ranges']} tensor(s), "
        f"sha256 {entry['sha256'][:12]}; no calibration data"
    )
