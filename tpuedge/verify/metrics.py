"""Error metrics between a reference tensor (the float IR) and a runtime's tensor.

Everything here is numpy only. `compare_output` measures one model output over all
samples; `ErrorAccumulator` sums the same statistics sample by sample for per-layer work,
where keeping every intermediate tensor of every sample would cost too much memory.

SNR is 10·log10(Σ ref² / Σ (ref − got)²) in dB, capped at `SNR_CAP_DB` (an exact match would
be infinite). The per-channel SNR averages the SNR of each channel: one loud channel (a
per-tensor int8 scale set by an outlier) hides crushed quiet channels from the whole-tensor
SNR but not from the per-channel one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from tpuedge.quantize.metrics import cosine

__all__ = [
    "SNR_CAP_DB",
    "SNR_FLOOR_DB",
    "OutputMetrics",
    "ErrorAccumulator",
    "compare_output",
    "snr_db",
    "is_classifier_shaped",
    "channel_axis",
]

SNR_CAP_DB = 120.0
SNR_FLOOR_DB = -60.0
_TINY = 1e-30
# Channels whose reference energy is below this fraction of the loudest channel's carry no
# signal (a dead ReLU channel); their SNR would be noise over nothing, so they are left out.
_SILENT_CHANNEL = 1e-10


def snr_db(signal_energy: float | np.ndarray, noise_energy: float | np.ndarray) -> float | np.ndarray:
    """10·log10(signal/noise), clipped to [SNR_FLOOR_DB, SNR_CAP_DB]; exact → the cap."""
    signal = np.asarray(signal_energy, dtype=np.float64)
    noise = np.asarray(noise_energy, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = 10.0 * np.log10(np.maximum(signal, _TINY) / np.maximum(noise, _TINY))
    value = np.where(noise <= _TINY, SNR_CAP_DB, value)
    value = np.clip(value, SNR_FLOOR_DB, SNR_CAP_DB)
    return float(value) if value.ndim == 0 else value


def is_classifier_shaped(shape: tuple[int, ...]) -> bool:
    """(batch, classes) with 2 ≤ classes ≤ 100 000: argmax over the last axis means something."""
    return len(shape) == 2 and 2 <= shape[-1] <= 100_000


def channel_axis(shape: tuple[int, ...]) -> int | None:
    """The channel axis of an IR (PyTorch-layout) tensor: 1 for NCHW / NC, last for (N, L, D)."""
    if len(shape) < 2:
        return None
    return 1 if len(shape) in (2, 4, 5) else len(shape) - 1


@dataclass(frozen=True)
class OutputMetrics:
    """How one runtime output compares with the float IR's output over all samples."""

    name: str
    shape: tuple[int, ...]
    max_abs_err: float
    mean_abs_err: float
    cosine: float
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
    top1 = None
    if is_classifier_shaped(ref.shape) and ref.shape[0] > 0:
        top1 = float(np.mean(np.argmax(ref, axis=-1) == np.argmax(out, axis=-1)))
    return OutputMetrics(
        name=name,
        shape=tuple(int(d) for d in ref.shape),
        max_abs_err=float(err.max()) if err.size else 0.0,
        mean_abs_err=float(err.mean()) if err.size else 0.0,
        cosine=cosine(ref, out),
        snr_db=snr_db(np.sum(ref * ref), np.sum((ref - out) ** 2)),
        top1_agreement=top1,
    )


class ErrorAccumulator:
    """Running sums for one tensor compared over many samples (per-layer numerics)."""

    def __init__(self) -> None:
        self.samples = 0
        self.signal = 0.0
        self.noise = 0.0
        self.dot = 0.0
        self.ref_sq = 0.0
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
        self.ref_sq += float(np.sum(ref * ref))
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
        if self.ref_sq == 0.0 and self.got_sq == 0.0:
            return 1.0
        if self.ref_sq == 0.0 or self.got_sq == 0.0:
            return 0.0
        return float(self.dot / np.sqrt(self.ref_sq * self.got_sq))
