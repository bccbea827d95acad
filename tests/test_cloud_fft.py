"""Complex FFTs in forward on cloud-tpu: FNet's token mixing (fft over two axes, real part) and
a Fourier neural operator's spectral convolution (rfft2, complex weights, irfft2), built and
checked against torch on XLA:CPU by the build itself, and a train step's gradients.

Old code: `aten._fft_c2c` and `aten._fft_c2r` had no lowering (HF FNet was refused).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge


class FNetMixing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real)


class SpectralConv(torch.nn.Module):
    """FNO: keep the lowest modes, multiply them by learned complex weights, back to the grid."""

    def __init__(self, modes: int = 3):
        super().__init__()
        self.modes = modes
        self.weight = torch.nn.Parameter(torch.randn(4, 4, modes, modes, 2) * 0.1)

    def forward(self, x):
        spectrum = torch.fft.rfft2(x)[:, :, : self.modes, : self.modes]
        mixed = torch.einsum("bixy,ioxy->boxy", spectrum, torch.view_as_complex(self.weight))
        full = torch.zeros(x.shape[0], 4, x.shape[-2], x.shape[-1] // 2 + 1, dtype=torch.complex64)
        full = torch.cat([torch.cat([mixed, full[:, :, : self.modes, self.modes :]], -1), full[:, :, self.modes :]], -2)
        return torch.fft.irfft2(full, s=x.shape[-2:]) + x


@pytest.mark.parametrize("make,shape", [(FNetMixing, (2, 6, 8)), (SpectralConv, (2, 4, 8, 8))], ids=["fnet", "fno"])
def test_complex_ffts_build_for_cloud_tpu(tmp_path, make, shape):
    torch.manual_seed(0)
    program = tpuedge.export(make().eval(), (torch.randn(shape),), name=make.__name__.lower())
    assert not program.check("cloud-tpu")
    artifact = tpuedge.build(program, "cloud-tpu", tmp_path / "cloud")
    assert float(artifact.manifest["verification"]["max_abs_error"]) < 1e-4


def test_a_spectral_layer_trains_as_torch_does():
    """One SGD step through rfft2, complex weights and irfft2: the loss and the updated weights
    as torch's own step gives them."""
    from cloud_train_helpers import one_step

    torch.manual_seed(0)
    model = SpectralConv()
    batch = (torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8))
    torch_loss, loss, theirs, ours = one_step(
        model, batch, lambda p: torch.optim.SGD(p, lr=0.5), torch.nn.functional.mse_loss
    )
    np.testing.assert_allclose(loss, torch_loss, rtol=1e-5)
    assert not torch.equal(ours.weight.detach(), model.weight.detach())  # the step moved it
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-4, atol=1e-6)
