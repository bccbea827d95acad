"""torch.stft as a convolution with a DFT basis (shared_ir/passes/stft_conv.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.constant_fold import FoldConstants
from tpuedge.shared_ir.passes.stft_conv import StftAsConvolution
from tpuedge.shared_ir.program import Program


class SpectrogramNet(torch.nn.Module):
    """A keyword-spotting front end in forward: |STFT| (a shorter window), a mel-like projection, a CNN."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(48))
        self.register_buffer("mel", torch.rand(33, 12))
        self.conv = torch.nn.Conv1d(12, 8, 3)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, audio):
        magnitude = torch.stft(audio, 64, 16, win_length=48, window=self.window, return_complex=True).abs()
        features = torch.matmul(magnitude.transpose(1, 2), self.mel).transpose(1, 2)
        return self.head(torch.relu(self.conv(features)).mean(-1))


class Readers(torch.nn.Module):
    """Every reader of the complex result the pass takes, a window made in forward, normalized, one signal."""

    def forward(self, audio):
        spec = torch.stft(
            audio, 32, 8, window=torch.hann_window(32), return_complex=True, normalized=True, center=False
        )
        return spec.abs(), torch.view_as_real(spec), spec.real, spec.imag


def _audio(seed: int, shape=(1, 400)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_stft_becomes_a_convolution():
    for module, shape in ((SpectrogramNet(), (2, 400)), (Readers(), (400,))):
        torch.manual_seed(0)
        program = tpuedge.export(module.eval(), (torch.from_numpy(_audio(0, shape)),), name="spectrogram")
        folded, _ = FoldConstants()(program.exported_program)  # the window made in forward, as the builds fold it first
        ep, result = StftAsConvolution()(folded)
        assert result.changed == 1
        rewritten = Program(ep, name="spectrogram")
        assert not [k for k in rewritten.op_histogram if "stft" in k or "real" in k or "imag" in k]
        for seed in range(2):
            for ours, reference in zip(rewritten.run(_audio(seed, shape)), program.run(_audio(seed, shape))):
                np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())


def test_android_and_mcu_build_a_spectrogram_in_forward():
    """Old code: the android check refused complex64, mcu's aten.stft, aten.abs and complex64."""
    torch.manual_seed(0)
    program = tpuedge.export(SpectrogramNet().eval(), (torch.from_numpy(_audio(0)),), name="spectrogram")
    assert program.check("android") == [] and program.check("mcu") == []
    android = tpuedge.build(program, "android", None, quantize="none")
    for seed in range(2):
        np.testing.assert_allclose(android.run(_audio(seed))[0], program.run(_audio(seed))[0], rtol=1e-4, atol=1e-4)
    assert_mcu_follows_float(program, lambda seed: [_audio(seed)])


def test_cloud_trains_through_the_fft():
    """The cloud backend keeps the FFT (jnp.fft.rfftn, complex64 on TPU) instead of the convolution.
    Old code: its check refused aten._fft_r2c, aten.view_as_real and complex64."""
    for module, shape in ((SpectrogramNet(), (1, 400)), (Readers(), (400,))):
        torch.manual_seed(0)
        program = tpuedge.export(module.eval(), (torch.from_numpy(_audio(0, shape)),), name="spectrogram")
        assert program.check("cloud-tpu") == []
        artifact = tpuedge.build(program, "cloud-tpu", None)
        for ours, reference in zip(artifact.run(_audio(1, shape)), program.run(_audio(1, shape))):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
