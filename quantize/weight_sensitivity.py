"""Per-weight int8 sensitivity on the IR: which weight tensors cost the model its accuracy when
their values are rounded to int8, activations left float.

Where every op already computes in float and the model still misses its budget, the error is in
the int8 weights alone (the int8 search's last rung, quantize/float_weights.py). It is rarely spread
evenly: in a one-off measurement on the zoo's random-init MobileNetV2 (every weight int8: mean
per-sample cosine 0.985), the stem convolution's 864 weights alone cost 0.010, and float32 for
it gave 0.991; in Resemblyzer's speaker encoder (0.883) the first LSTM layer's input weights
(40,960 of its 1.4M parameters, reading a mel power spectrogram) cost 0.114, and float32 for
them gave 0.999. Each weight tensor is rounded alone (symmetric int8, one scale per output
channel as the quantizer does, or per tensor) and the program is run in torch on a few samples:
one forward pass per weight tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "WeightSensitivity",
    "rank_weights",
    "ranking_from_json",
    "weight_readers",
    "MAX_RANKED_WEIGHTS",
    "MIN_WEIGHT_ELEMENTS",
    "WEIGHT_RANKING_SAMPLES",
]

# Samples each weight's cost is measured on (a torch forward pass each; it only orders the
# weights, and the recipes it leads to are measured on all the search's samples). RegNetY-400MF's
# 86 tensors took 7.3 s on 4 samples, 2.2 s on 2; MobileNetV2 chose the same 4 tensors and bytes.
WEIGHT_RANKING_SAMPLES = 2

# More weight tensors than this are not ranked (one forward pass each); the zoo's 23 models have
# 3 (digits_cnn) to 86 (RegNetY-400MF).
MAX_RANKED_WEIGHTS = 512
# Smaller tensors (biases, norm scales, PReLU slopes) are left out: the quantizer keeps biases in
# int32, and a float copy of a tiny tensor cannot be what a model's budget is missing.
MIN_WEIGHT_ELEMENTS = 64


@dataclass(frozen=True)
class WeightSensitivity:
    name: str  # the tensor's state-dict name in the program (a parameter, buffer or constant)
    shape: tuple[int, ...]
    loss: float  # 1 - the worst output's mean per-sample cosine with only this tensor's values in int8
    scope: str  # module scope of the first op reading it, litert-torch's tensor-name form
    values: Any = field(repr=False, compare=False)  # the program's own tensor (not a copy), as numpy

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape))

    def to_json(self) -> dict:
        return {"weight": self.name, "shape": list(self.shape), "loss": round(self.loss, 6), "scope": self.scope}


def weight_readers(program: Any) -> dict[str, list]:
    """State-dict name -> the IR call nodes reading it, for every floating tensor of at least 2
    dimensions and MIN_WEIGHT_ELEMENTS elements that a call reads (in graph order)."""
    ep = program.exported_program
    sig = ep.graph_signature
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    tensors = _state_tensors(program)
    found: dict[str, list] = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in names:
            continue
        value = tensors.get(names[node.name])
        if value is None or not value.is_floating_point() or value.dim() < 2 or value.numel() < MIN_WEIGHT_ELEMENTS:
            continue
        readers = [user for user in node.users if user.op == "call_function"]
        if readers:
            found[names[node.name]] = readers
    return found


def _rounded(value, per_channel: bool):
    """`value` rounded to symmetric int8 and back (one scale per index of axis 0, or per tensor),
    with the project's one quantize/dequantize pair (quantize/affine.py)."""
    import torch

    from tpuedge.quantize.affine import dequantize, quantize

    array = value.detach().float().numpy()
    flat = array.reshape(array.shape[0], -1) if per_channel else array.reshape(1, -1)
    scale = np.maximum(np.abs(flat).max(axis=1), np.finfo(np.float32).tiny) / 127
    axis = 0 if per_channel else None
    scale = scale if per_channel else scale[0]
    q = quantize(array, scale, 0, np.int8, axis=axis)
    return torch.from_numpy(dequantize(q, scale, 0, axis=axis)).to(value.dtype)


def _state_tensors(program: Any) -> dict:
    """The program's parameters, buffers and constants by state-dict name."""
    ep = program.exported_program
    return {**ep.state_dict, **ep.constants}


def rank_weights(program: Any, samples: list, *, per_channel: bool = True) -> list[WeightSensitivity]:
    """Every weight tensor of `program` (weight_readers) with its int8 loss on `samples`, costliest
    first; [] where there are more than MAX_RANKED_WEIGHTS."""
    from tpuedge.quantize.metrics import mean_sample_cosine
    from tpuedge.shared_ir.sources import module_scope

    weights = weight_readers(program)
    if not weights or len(weights) > MAX_RANKED_WEIGHTS:
        return []
    tensors = _state_tensors(program)

    def stacked(runs: list[list[np.ndarray]]) -> list[np.ndarray]:
        return [np.stack([np.asarray(run[i], np.float64) for run in runs]) for i in range(len(runs[0]))]

    reference = stacked([program.run(*sample) for sample in samples])
    ranking = []
    for name, readers in weights.items():
        value = tensors[name]
        rounded = {name: _rounded(value, per_channel)}
        got = stacked([program.run_replacing(rounded, *sample) for sample in samples])
        worst = min(mean_sample_cosine(ref, out) for ref, out in zip(reference, got))
        ranking.append(
            WeightSensitivity(
                name, tuple(value.shape), 1.0 - float(worst), module_scope(readers[0]), value.detach().numpy()
            )
        )
    return sorted(ranking, key=lambda w: -w.loss)


def ranking_from_json(program: Any, entries: list[dict]) -> list[WeightSensitivity]:
    """A ranking back from its `to_json` entries (the build cache keeps those), each tensor's
    values read from `program` again."""
    tensors = _state_tensors(program)
    return [
        WeightSensitivity(
            e["weight"], tuple(e["shape"]), float(e["loss"]), e["scope"], tensors[e["weight"]].detach().numpy()
        )
        for e in entries
    ]
