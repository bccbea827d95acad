"""Which IR node each candidate runtime tensor holds, settled by value on one sample.

`tflite_graph.match_tensors` gives each runtime tensor its candidates by structure (scopes and
shapes); these functions compare the values. `best_candidates` places trained ranges, where
only the node's own values will do; `resolve_matches` serves per-layer verify, which also
accepts a folded constant (divided out) and lets one tensor stand for value-moving nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpuedge.shared_ir.ir_values import IRLayer
from tpuedge.edge.intermediates.tflite_graph import TensorCandidates, to_ir_layout

__all__ = ["TensorMatch", "best_candidates", "resolve_matches"]

# Relative error (|got - ref| / |ref|) above which a runtime tensor is taken to hold another
# value than the candidate node's, not a noisy copy of it: worse than a tensor of zeros.
_UNRELATED = 1.0
_DROPPED_AXES_TIE = 1e-9  # more than a tie's tolerance, far less than any real error
_SCALED_TIE = 1e-6  # a fit that needs a constant factor loses a tie against one that does not
_LATER_SLACK = 0.1  # how much further from a node a later tensor may be and still stand for it
_SCALED_MIN_SIZE = 64  # a factor fits any tensor of one value: only larger ones can show a fold
_FOLDED_FACTOR = 0.25  # |log2| of the smallest factor taken for a folded constant (x0.84 or x1.19)


@dataclass(frozen=True)
class TensorMatch:
    """Runtime tensor `tensor` holds IR node `node`'s value, transposed by `perm` (IR -> runtime)
    and multiplied by `scale` (a constant the converter folded in: attention's 1/sqrt(d) split
    over the query and key projections)."""

    tensor: int
    node: str
    perm: tuple[int, ...]
    scale: float = 1.0


@dataclass(frozen=True)
class _Fit:
    node: str
    perm: tuple[int, ...]
    err: float  # |value / scale - node's value| / |node's value| on the sample
    scale: float = 1.0


def _fits(entry: TensorCandidates, value, reference: dict[str, np.ndarray], *, scaled: bool) -> list[_Fit]:
    """How well one runtime tensor holds each of its candidates, in candidate order; `scaled`
    also tries the value times a constant (the least-squares one), kept where it fits better."""
    out = []
    for name, perm in entry.candidates:
        ref = reference.get(name)
        if ref is None or value is None:
            continue
        got = to_ir_layout(value, perm, ref.shape)
        if got.shape != ref.shape:
            continue
        ref_norm = float(np.linalg.norm(ref))
        norm = ref_norm or 1.0
        # a node of the tensor's own rank wins a tie against one it only matches with
        # size-1 axes put back (the mask a CAST yields, not that mask broadcast to 4-D)
        tie = _DROPPED_AXES_TIE if value.ndim != ref.ndim else 0.0
        fit = _Fit(name, perm, float(np.linalg.norm(got - ref)) / norm + tie)
        if scaled and ref_norm > 0 and fit.err > _SCALED_TIE and ref.size >= _SCALED_MIN_SIZE:
            factor = float(np.vdot(got, ref)) / ref_norm**2
            # a folded constant, not a quantized tensor's small gain error (that is what the
            # comparison is there to show): far from 1, and the fit much closer for it
            if factor > 0 and abs(np.log2(factor)) > _FOLDED_FACTOR:
                err = float(np.linalg.norm(got / factor - ref)) / norm + tie + _SCALED_TIE
                if err < fit.err / 4:
                    fit = _Fit(name, perm, err, factor)
        out.append(fit)
    return out


def _ties(err: float, best_err: float) -> bool:
    return err <= best_err * (1 + 1e-6) + 1e-12


def _best(fits: list[_Fit]) -> _Fit | None:
    """The closest fit (a tie goes to the later node), if it is closer than a tensor of zeros;
    its `err` is the smallest of the tie."""
    best, best_err = None, np.inf
    for fit in fits:
        if _ties(fit.err, best_err):
            best, best_err = fit, min(fit.err, best_err)
    return None if best is None or best_err > _UNRELATED else _Fit(best.node, best.perm, best_err, best.scale)


def best_candidates(
    found: list[TensorCandidates], reference: dict[str, np.ndarray], runtime: dict[int, np.ndarray]
) -> dict[int, tuple[str, tuple[int, ...]]]:
    """Per runtime tensor, the candidate (node, perm) whose value is closest on one sample.

    `runtime` holds the dequantized tensors of that sample. Ties go to the later node: a fused
    op yields its last node's value. A tensor further from its best candidate than a tensor of
    zeros holds none of them (a value the converter changed on the way: a softmax scale folded
    into the q/k projections) and is left out.
    """
    best_of: dict[int, tuple[str, tuple[int, ...]]] = {}
    for entry in found:
        best = _best(_fits(entry, runtime.get(entry.tensor), reference, scaled=False))
        if best is not None:
            best_of[entry.tensor] = (best.node, best.perm)
    return best_of


def resolve_matches(
    found: list[TensorCandidates],
    reference: dict[str, np.ndarray],
    runtime: dict[int, np.ndarray],
    layers: dict[str, IRLayer],
) -> list[TensorMatch]:
    """Pick each tensor's node by value on one sample, then keep one tensor per node: the LAST
    that holds it about as well as the earlier ones. An op lowered to several ops (LayerNorm as
    mean, sub, mul, ...) yields its value in the group's last tensor; a quantized input's
    QUANTIZE output comes after the float input; layout copies hold the same value anyway.

    Unlike `best_candidates` (which places ranges, where only the node's own values will do), a
    tensor may hold its node times a constant the converter folded in (attention's 1/sqrt(d)
    split over the query and key projections); the comparison divides it out. A tensor also
    stands for the candidates that tie with its node where one of the two only moves the
    other's values (a view, a transpose, an attention output reshaped for the next Linear):
    they hold the same numbers by construction, so the one tensor is compared against each.
    """
    from tpuedge.quantize.activation_ranges import SAME_GRID_OPS

    chosen: dict[str, tuple[float, TensorMatch]] = {}

    def keep(fit: _Fit, tensor: int) -> None:
        # the last tensor that holds the node about as well (a quantized input's QUANTIZE output
        # after the float input): an unrelated tensor that only just beats zeros never
        # displaces the node's own
        if fit.node not in chosen or fit.err <= chosen[fit.node][0] + _LATER_SLACK:
            chosen[fit.node] = (fit.err, TensorMatch(tensor, fit.node, fit.perm, fit.scale))

    for entry in found:
        fits = _fits(entry, runtime.get(entry.tensor), reference, scaled=True)
        best = _best(fits)
        if best is None:
            continue
        moves = layers[best.node].op in SAME_GRID_OPS
        for fit in fits:
            if fit.node != best.node and (moves or layers[fit.node].op in SAME_GRID_OPS) and _ties(fit.err, best.err):
                keep(fit, entry.tensor)
        keep(best, entry.tensor)
    return [match for _, match in chosen.values()]
