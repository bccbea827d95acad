"""Accuracy of a converted model against the float IR: the numbers every build reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["AccuracySummary", "compare_outputs", "centered_cosine", "cosine"]


@dataclass(frozen=True)
class AccuracySummary:
    """Quantized/converted outputs vs the float reference, over a set of samples.

    max_abs_error: largest |converted - float| over all outputs and samples.
    output_range: max - min of the float outputs (to read max_abs_error relative to it).
    cosine: cosine similarity of all outputs flattened together.
    centered_cosine: cosine after subtracting the float mean over samples, per element: the
        input-dependent part (a model that ignores its input scores ~0 here).
    top1_agreement: share of rows where argmax over the last axis agrees (None for outputs with
        a last axis of 1).
    samples: how many samples were compared.
    """

    max_abs_error: float
    output_range: float
    cosine: float
    centered_cosine: float
    top1_agreement: float | None
    samples: int

    def to_json(self) -> dict:
        return {k: (None if v is None else (round(float(v), 7) if isinstance(v, float) else v)) for k, v in asdict(self).items()}

    def describe(self) -> str:
        top1 = "n/a" if self.top1_agreement is None else f"{100 * self.top1_agreement:.1f}%"
        return (
            f"max abs err {self.max_abs_error:.3g} (output range {self.output_range:.3g}), "
            f"cosine {self.cosine:.5f}, centered cosine {self.centered_cosine:.5f}, "
            f"top-1 agreement {top1} over {self.samples} sample(s)"
        )


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays (flattened, float64); 1.0 for two all-zero arrays."""
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def centered_cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Cosine of (candidate - mean_ref) vs (reference - mean_ref); arrays are [samples, ...]."""
    reference = np.asarray(reference, np.float64)
    candidate = np.asarray(candidate, np.float64)
    if reference.shape[0] < 2:
        return cosine(reference.ravel(), candidate.ravel())
    mean = reference.mean(axis=0, keepdims=True)
    return cosine((reference - mean).ravel(), (candidate - mean).ravel())


def compare_outputs(
    reference: Sequence[Sequence[np.ndarray]], candidate: Sequence[Sequence[np.ndarray]]
) -> AccuracySummary:
    """reference[i][j], candidate[i][j]: output j of sample i (float reference, converted model)."""
    if not reference:
        raise ValueError("no samples to compare")
    n_out = len(reference[0])
    refs = [np.stack([np.asarray(s[j], np.float64) for s in reference]) for j in range(n_out)]
    cands = [np.stack([np.asarray(s[j], np.float64).reshape(np.shape(reference[0][j])) for s in candidate]) for j in range(n_out)]
    flat_r = np.concatenate([r.ravel() for r in refs])
    flat_c = np.concatenate([c.ravel() for c in cands])
    centered_r = np.concatenate([(r - r.mean(axis=0, keepdims=True)).ravel() if len(r) > 1 else r.ravel() for r in refs])
    centered_c = np.concatenate(
        [(c - r.mean(axis=0, keepdims=True)).ravel() if len(r) > 1 else c.ravel() for r, c in zip(refs, cands)]
    )
    agree, rows = 0, 0
    for r, c in zip(refs, cands):
        if r.ndim >= 2 and r.shape[-1] > 1:
            agree += int((r.argmax(-1) == c.argmax(-1)).sum())
            rows += int(np.prod(r.shape[:-1]))
    return AccuracySummary(
        max_abs_error=float(np.abs(flat_r - flat_c).max()) if flat_r.size else 0.0,
        output_range=float(flat_r.max() - flat_r.min()) if flat_r.size else 0.0,
        cosine=cosine(flat_r, flat_c),
        centered_cosine=cosine(centered_r, centered_c),
        top1_agreement=(agree / rows) if rows else None,
        samples=len(reference),
    )
