"""A LocalResponseNorm after a convolution compiles for TPU (cloud/lowerings/pooling.py).

torch writes LocalResponseNorm as a zero pad and an avg_pool3d over the channels. Lowered as a
reduce_window, libtpu's XLA:TPU compile rejected it ("Binary op with incompatible shapes" in its
post-layout pass) or, with the squares written out, aborted the whole process from its
space-to-batch pass: a CHECK failure, no exception. Small windows are sums of slices now. The
builds run in a child process so that an abort fails this test, not the test session.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.needs_libtpu

SCRIPT = """
import sys, torch, torch.nn as nn, torch.nn.functional as F, tpuedge

class ConvThen(nn.Module):
    def __init__(self, then):
        super().__init__()
        self.conv, self.then = nn.Conv2d(3, 8, 3), then

    def forward(self, x):
        return self.then(self.conv(x))

class ChannelWindowOfSquares(nn.Module):  # LocalResponseNorm's denominator, written out
    def forward(self, y):
        return F.avg_pool3d(F.pad((y * y).unsqueeze(1), (0, 0, 0, 0, 1, 1)), (3, 1, 1), stride=1).squeeze(1)

torch.manual_seed(0)
then = {"lrn": nn.LocalResponseNorm(3), "squares": ChannelWindowOfSquares()}[sys.argv[1]]
program = tpuedge.export(ConvThen(then).eval(), (torch.randn(1, 3, 16, 16),), name="conv_" + sys.argv[1])
tpuedge.build(program, "cloud-tpu", sys.argv[2])
"""


@pytest.mark.parametrize("then", ["lrn", "squares"])
def test_a_window_over_a_convolutions_channels_compiles_for_tpu(tmp_path, then):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, then, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert (tmp_path / "out" / "model.jaxexport").is_file()
