"""The one set of accuracy metrics: build reports, `tpuedge verify` and the benches use these.

A converted model's outputs (`candidate`) against the float IR's (`reference`), first axis =
samples. Every number a manifest or a verify report prints comes from `compare_output`, so
the two are comparable on the same samples. Numpy only.

Definitions:
- max_abs_error / mean_abs_error: of |candidate - reference| over every element (max_abs_error:
  a NaN or infinity both sides have at one element counts as no error, one side's alone as infinite).
- cosine: cosine similarity of the whole output (all samples flattened together).
- centered_cosine: cosine after subtracting the float mean over samples, per element: the
  input-dependent part (a model that ignores its input scores ~0 here, while its plain cosine
  can look fine).
- snr_db: 10·log10(Σ ref² / Σ (ref − got)²), clipped to [SNR_FLOOR_DB, SNR_CAP_DB] (an exact
  match would be infinite). `ErrorAccumulator.channel_snr_db` averages the SNR of each channel:
  one loud channel (a per-tensor int8 scale set by an outlier) hides crushed quiet channels from
  the whole-tensor SNR but not from the per-channel one.
- mean_sample_cosine: the cosine of each sample's output (flattened), averaged over samples:
  the build's accuracy budget (--min-cosine). One bad sample can't hide in the others' energy as
  it can in the whole-output cosine. Outputs with one value per sample use the whole-output
  cosine (a one-element cosine is only a sign).
- top1_agreement: only for classifier-shaped outputs, (samples, classes) with 2 ≤ classes ≤
  100 000: the share of samples whose argmax agrees. Other outputs (feature maps, sequences of
  hidden states, embeddings with a token axis, one score per sample) have none: an argmax over
  a hidden-state axis measures nothing, and reporting it reads as a failure that isn't one.
- argmax_agreement: for an output known to hold class scores on its last axis (the budget's
  class-score outputs), the share of rows over every other axis whose argmax agrees: per
  sample for (samples, classes), per position for a sequence of token scores.
- decision_agreement: for a probability (a sigmoid's speech or face score), the share of elements
  on the same side of 0.5 as the float's: the decision a user takes from it.
- task_accuracy: share of samples whose argmax over a classifier-shaped output is the label.

Outputs collected one call at a time (`compare_outputs`) are joined by `stack_samples`, with the
rule the verify runner uses: per-call arrays with a leading batch of 1 are concatenated on it,
anything else gets a new samples axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "SNR_CAP_DB",
    "SNR_FLOOR_DB",
    "MAX_CLASSES",
    "OutputMetrics",
    "AccuracySummary",
    "ErrorAccumulator",
    "compare_output",
    "compare_outputs",
    "max_abs_error",
    "cosine",
    "centered_cosine",
    "mean_sample_cosine",
    "snr_db",
    "top1_agreement",
    "argmax_agreement",
    "decision_agreement",
    "task_accuracy",
    "is_classifier_shaped",
    "channel_axis",
    "stack_samples",
]

SNR_CAP_DB = 120.0
SNR_FLOOR_DB = -60.0
MAX_CLASSES = 100_000
_TINY = 1e-30
# Channels whose reference energy is below this fraction of the loudest channel's carry no
# signal (a dead ReLU channel); their SNR would be noise over nothing, so they are left out.
_SILENT_CHANNEL = 1e-10


# ---- the definitions ---------------------------------------------------------------------------
def max_abs_error(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Largest |candidate - reference| (float64); 0.0 for empty arrays. A NaN or infinity where the
    reference has the same is no error (both runtimes agree on a log of a negative); one where
    it does not is an infinite error."""
    reference = np.asarray(reference, np.float64)
    if reference.size == 0:
        return 0.0
    candidate = np.asarray(candidate, np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(reference - candidate)
    agree = (np.isnan(reference) & np.isnan(candidate)) | (np.isinf(reference) & (reference == candidate))
    return float(np.max(np.where(agree, 0.0, np.where(np.isnan(diff), np.inf, diff))))


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
    if reference.ndim == 0 or reference.shape[0] < 2:
        return cosine(reference, candidate)
    mean = reference.mean(axis=0, keepdims=True)
    return cosine(reference - mean, candidate - mean)


def mean_sample_cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Mean over the first axis (samples) of each sample's cosine; arrays are [samples, ...]."""
    reference = np.asarray(reference, np.float64)
    candidate = np.asarray(candidate, np.float64).reshape(reference.shape)
    if reference.ndim < 2 or reference[0].size < 2:
        return cosine(reference, candidate)
    return float(np.mean([cosine(r, c) for r, c in zip(reference, candidate)]))


def snr_db(signal_energy: float | np.ndarray, noise_energy: float | np.ndarray) -> float | np.ndarray:
    """10·log10(signal/noise), clipped to [SNR_FLOOR_DB, SNR_CAP_DB]; exact → the cap."""
    signal = np.asarray(signal_energy, dtype=np.float64)
    noise = np.asarray(noise_energy, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = 10.0 * np.log10(np.maximum(signal, _TINY) / np.maximum(noise, _TINY))
    value = np.where(noise <= _TINY, SNR_CAP_DB, value)
    value = np.clip(value, SNR_FLOOR_DB, SNR_CAP_DB)
    return float(value) if value.ndim == 0 else value


def is_classifier_shaped(shape: Sequence[int]) -> bool:
    """(samples, classes) with 2 ≤ classes ≤ MAX_CLASSES: argmax over the last axis means something."""
    return len(shape) == 2 and 2 <= shape[-1] <= MAX_CLASSES


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """Share of samples whose argmax agrees; None unless the output is classifier-shaped."""
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    if not is_classifier_shaped(reference.shape) or reference.shape[0] == 0:
        return None
    return float(np.mean(np.argmax(reference, axis=-1) == np.argmax(candidate, axis=-1)))


def argmax_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """Share of rows (every axis but the last) whose argmax over the last axis agrees; None when
    there is no row or fewer than 2 classes."""
    reference = np.asarray(reference)
    candidate = np.asarray(candidate).reshape(reference.shape)
    if reference.ndim < 1 or reference.shape[-1] < 2 or reference.size == 0:
        return None
    return float(np.mean(np.argmax(reference, axis=-1) == np.argmax(candidate, axis=-1)))


def decision_agreement(reference: np.ndarray, candidate: np.ndarray, threshold: float = 0.5) -> float | None:
    """Share of elements on the same side of `threshold` in both; None for an empty array."""
    reference = np.asarray(reference)
    if reference.size == 0:
        return None
    candidate = np.asarray(candidate).reshape(reference.shape)
    return float(np.mean((reference > threshold) == (candidate > threshold)))


def task_accuracy(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """Share of samples whose argmax is the label (a fraction); None unless `scores` is
    classifier-shaped with one row per label."""
    scores, labels = np.asarray(scores), np.asarray(labels).reshape(-1)
    if not is_classifier_shaped(scores.shape) or len(scores) != len(labels) or not len(labels):
        return None
    return float(np.mean(np.argmax(scores, axis=-1) == labels))


def channel_axis(shape: tuple[int, ...]) -> int | None:
    """The channel axis of an IR (PyTorch-layout) tensor: 1 for NCHW / NC, last for (N, L, D)."""
    if len(shape) < 2:
        return None
    return 1 if len(shape) in (2, 4, 5) else len(shape) - 1


def stack_samples(per_call: Sequence[np.ndarray]) -> np.ndarray:
    """One output's values from several calls as one array, first axis = samples."""
    arrays = [np.asarray(a) for a in per_call]
    if arrays and all(a.ndim >= 1 and a.shape[0] == 1 for a in arrays):
        return np.concatenate(arrays, axis=0)
    return np.stack(arrays)


# ---- one output --------------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputMetrics:
    """How one converted output compares with the float IR's output over all samples."""

    name: str
    shape: tuple[int, ...]
    max_abs_error: float
    mean_abs_error: float
    cosine: float
    centered_cosine: float
    snr_db: float
    top1_agreement: float | None  # None when the output isn't classifier-shaped

    def to_json(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def compare_output(name: str, reference: np.ndarray, got: np.ndarray) -> OutputMetrics:
    """Metrics of `got` against `reference` (same shape; first axis = samples)."""
    reference = np.asarray(reference)
    got = np.asarray(got)
    if reference.shape != got.shape:
        raise ValueError(f"output {name!r}: runtime shape {got.shape} != reference shape {reference.shape}")
    ref = reference.astype(np.float64)
    out = got.astype(np.float64)
    err = np.abs(ref - out)
    return OutputMetrics(
        name=name,
        shape=tuple(int(d) for d in ref.shape),
        max_abs_error=max_abs_error(ref, out),
        mean_abs_error=float(err.mean()) if err.size else 0.0,
        cosine=cosine(ref, out),
        centered_cosine=centered_cosine(ref, out),
        snr_db=snr_db(np.sum(ref * ref), np.sum((ref - out) ** 2)),
        top1_agreement=top1_agreement(ref, out),
    )


# ---- a whole model, as build reports record it -------------------------------------------------
@dataclass(frozen=True)
class AccuracySummary:
    """Every output of a converted model vs the float reference, reduced to its worst output.

    max_abs_error: the largest over all outputs; output_range: max - min of the float outputs
    (to read max_abs_error against); cosine, centered_cosine, top1_agreement: the lowest over the
    outputs (top-1 over the classifier-shaped ones, None if there are none), each from
    `compare_output`, so a one-output model's numbers are exactly what `tpuedge verify` prints
    for that output on the same samples; samples: how many were compared.
    """

    max_abs_error: float
    output_range: float
    cosine: float
    centered_cosine: float
    top1_agreement: float | None
    samples: int
    sample_cosine: float | None = None  # lowest over outputs of mean_sample_cosine (None: not measured)

    @classmethod
    def failed_to_run(cls, samples: int) -> "AccuracySummary":
        """A candidate the runtime refused to run, or one whose outputs are not finite: the worst
        score there is (cosine -1)."""
        return cls(0.0, 0.0, -1.0, -1.0, 0.0, samples, -1.0)

    def to_json(self) -> dict:
        return {
            k: (None if v is None else (round(float(v), 7) if isinstance(v, float) else v))
            for k, v in asdict(self).items()
        }

    def describe(self) -> str:
        top1 = "n/a" if self.top1_agreement is None else f"{100 * self.top1_agreement:.1f}%"
        return (
            f"max abs err {self.max_abs_error:.3g} (output range {self.output_range:.3g}), "
            f"cosine {self.cosine:.5f}, centered cosine {self.centered_cosine:.5f}, "
            f"top-1 agreement {top1} over {self.samples} sample(s)"
        )


def compare_outputs(
    reference: Sequence[Sequence[np.ndarray]], candidate: Sequence[Sequence[np.ndarray]]
) -> AccuracySummary:
    """reference[i][j], candidate[i][j]: output j of call i (float reference, converted model)."""
    if not reference:
        raise ValueError("no samples to compare")
    per_output = []
    refs, gots = [], []
    for j in range(len(reference[0])):
        ref = stack_samples([s[j] for s in reference])
        got = stack_samples([np.asarray(s[j]).reshape(np.shape(reference[i][j])) for i, s in enumerate(candidate)])
        refs.append(ref)
        gots.append(got)
        per_output.append(compare_output(str(j), ref, got))
    flat = np.concatenate([r.astype(np.float64).ravel() for r in refs])
    top1 = [o.top1_agreement for o in per_output if o.top1_agreement is not None]
    return AccuracySummary(
        max_abs_error=max(o.max_abs_error for o in per_output),
        output_range=float(flat.max() - flat.min()) if flat.size else 0.0,
        cosine=min(o.cosine for o in per_output),
        centered_cosine=min(o.centered_cosine for o in per_output),
        top1_agreement=min(top1) if top1 else None,
        samples=len(reference),
        sample_cosine=min(mean_sample_cosine(r, g) for r, g in zip(refs, gots)),
    )


# ---- per-layer sums ----------------------------------------------------------------------------
class ErrorAccumulator:
    """Running sums for one tensor compared over many samples (per-layer numerics), where keeping
    every intermediate tensor of every sample would cost too much memory."""

    def __init__(self) -> None:
        self.samples = 0
        self.signal = 0.0
        self.noise = 0.0
        self.dot = 0.0
        self.got_sq = 0.0
        self.max_abs = 0.0
        self.channel_signal: np.ndarray | None = None
        self.channel_noise: np.ndarray | None = None

    def update(self, reference: np.ndarray, got: np.ndarray) -> None:
        ref = np.asarray(reference, dtype=np.float64)
        out = np.asarray(got, dtype=np.float64).reshape(ref.shape)
        diff = ref - out
        self.samples += 1
        self.signal += float(np.sum(ref * ref))
        self.noise += float(np.sum(diff * diff))
        self.dot += float(np.sum(ref * out))
        self.got_sq += float(np.sum(out * out))
        if diff.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(diff))))
        axis = channel_axis(ref.shape)
        if axis is not None:
            others = tuple(i for i in range(ref.ndim) if i != axis)
            sig = np.sum(ref * ref, axis=others)
            noi = np.sum(diff * diff, axis=others)
            if self.channel_signal is None:
                self.channel_signal, self.channel_noise = sig, noi
            else:
                self.channel_signal = self.channel_signal + sig
                self.channel_noise = self.channel_noise + noi

    @property
    def snr_db(self) -> float:
        return snr_db(self.signal, self.noise)

    @property
    def channel_snr_db(self) -> float:
        """Mean over the channels that carry signal of each channel's SNR (dB)."""
        if self.channel_signal is None or self.channel_signal.size < 2:
            return self.snr_db
        loud = self.channel_signal > _SILENT_CHANNEL * float(self.channel_signal.max())
        if not loud.any():
            return self.snr_db
        return float(np.mean(snr_db(self.channel_signal[loud], self.channel_noise[loud])))

    @property
    def cosine(self) -> float:
        """Same definition as `cosine` over everything accumulated."""
        if self.signal == 0.0 and self.got_sq == 0.0:
            return 1.0
        if self.signal == 0.0 or self.got_sq == 0.0:
            return 0.0
        return float(self.dot / np.sqrt(self.signal * self.got_sq))
