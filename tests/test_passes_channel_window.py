"""LocalResponseNorm's average over a window of channels as a 1x1 convolution
(shared_ir/passes/channel_window_conv.py), and its x ** 0.75 on mcu (powers.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from mcu_rewrite_helpers import assert_mcu_follows_float
from tpuedge.shared_ir.passes.channel_window_conv import ChannelWindowAsConvolution
from tpuedge.shared_ir.passes.powers import PowersAsProducts
from tpuedge.shared_ir.program import Program


class ConvLrn(torch.nn.Module):
    """An AlexNet-era block: conv, ReLU, LocalResponseNorm (size 5: two channels each side)."""

    def __init__(self, dims: int = 2):
        super().__init__()
        self.conv = (torch.nn.Conv2d if dims == 2 else torch.nn.Conv1d)(3, 8, 3)
        self.lrn = torch.nn.LocalResponseNorm(5, alpha=1e-2, k=2.0)  # a visible alpha: the window matters

    def forward(self, x):
        return self.lrn(torch.relu(self.conv(x)))


def _x(seed: int, shape) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)


def _program(dims: int = 2):
    torch.manual_seed(0)
    shape = (1, 3, 10, 10) if dims == 2 else (1, 3, 20)
    return tpuedge.export(ConvLrn(dims).eval(), (torch.from_numpy(_x(0, shape)),), name=f"lrn{dims}d"), shape


@pytest.mark.parametrize("dims", [2, 1])
def test_the_channel_window_becomes_a_convolution_exactly(dims):
    program, shape = _program(dims)
    ep, result = ChannelWindowAsConvolution()(program.exported_program)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert result.changed == 1 and not {"aten.avg_pool3d.default", "aten.avg_pool2d.default"} & targets
    for seed in range(3):
        np.testing.assert_allclose(
            Program(ep, name="lrn").run(_x(seed, shape))[0], program.run(_x(seed, shape))[0], rtol=1e-6, atol=1e-6
        )


def test_other_average_pools_are_left():
    pool = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AvgPool2d(3, stride=1))
    program = tpuedge.export(pool.eval(), (torch.zeros(1, 3, 8, 8),), name="pool")
    assert ChannelWindowAsConvolution()(program.exported_program)[1].changed == 0


def test_fractional_powers_become_square_roots():
    class Powers(torch.nn.Module):
        def forward(self, x):
            return x**0.75 + x**0.25

    x = np.random.default_rng(0).uniform(0.5, 4.0, (2, 6)).astype(np.float32)
    program = tpuedge.export(Powers(), (torch.from_numpy(x),), name="powers")
    ep, result = PowersAsProducts()(program.exported_program)
    assert result.changed == 2
    np.testing.assert_allclose(Program(ep, name="powers").run(x)[0], program.run(x)[0], rtol=1e-6)


def test_android_int8_builds_a_local_response_norm(tmp_path):
    """Old code: ai-edge-quantizer stopped at the STABLEHLO_REDUCE_WINDOW of the avg_pool3d."""
    program, shape = _program()
    calibration = [[_x(seed, shape)] for seed in range(10, 26)]
    artifact = tpuedge.build(program, "android", tmp_path / "out", quantize="int8", calibration=calibration)
    assert "STABLEHLO_REDUCE_WINDOW" not in artifact.manifest["op_histogram"]
    assert min(artifact.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"]) >= 0.99


def test_mcu_builds_a_local_response_norm():
    """Old code: `check --target mcu` refused aten.avg_pool3d and aten.pow.Tensor_Scalar."""
    program, shape = _program()
    assert not program.check("mcu")
    assert_mcu_follows_float(program, lambda seed: (_x(seed, shape),))
