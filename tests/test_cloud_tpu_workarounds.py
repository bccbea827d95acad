"""Programs libtpu's XLA:TPU compile failed on, written another way by the cloud lowering.

Talking heads (timm's EfficientFormerV2): 1x1 convolutions mixing attention maps over their
heads before and after a softmax. As convolutions, the compile failed inside its own passes
("INTERNAL: during context [post-layout]: Expected instruction to have shape equal to f32[49,8],
actual shape is f32[8,49]"); 1x1 convolutions are lowered as the matrix products they are
(cloud/lowerings/nn.py). The build runs in a child process, so that a compiler abort fails
this test and not the session.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tpuedge.cloud.tpu_compile import libtpu_unavailable_reason

pytestmark = pytest.mark.skipif(libtpu_unavailable_reason() is not None, reason=str(libtpu_unavailable_reason()))

SCRIPT = """
import sys, torch, torch.nn as nn, tpuedge

class TalkingHeads(nn.Module):
    def __init__(self, heads=8, tokens=49, dim=16):
        super().__init__()
        self.q, self.k, self.v = (nn.Conv2d(dim, heads * 4, 1) for _ in range(3))
        self.head1, self.head2 = nn.Conv2d(heads, heads, 1), nn.Conv2d(heads, heads, 1)
        self.bias = nn.Parameter(torch.randn(heads, tokens, tokens) * 0.1)
        self.heads, self.tokens = heads, tokens

    def forward(self, x):
        b = x.shape[0]
        q = self.q(x).reshape(b, self.heads, -1, self.tokens).permute(0, 1, 3, 2)
        k = self.k(x).reshape(b, self.heads, -1, self.tokens)
        v = self.v(x).reshape(b, self.heads, -1, self.tokens).permute(0, 1, 3, 2)
        attn = self.head2(self.head1((q @ k) * 0.5 + self.bias).softmax(dim=-1))
        return (attn @ v).transpose(2, 3).reshape(b, -1, 7, 7)

torch.manual_seed(0)
program = tpuedge.export(TalkingHeads().eval(), (torch.randn(1, 16, 7, 7),), name="talking_heads")
tpuedge.build(program, "cloud-tpu", sys.argv[1])
"""


def test_talking_heads_compile_for_tpu(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert (tmp_path / "out" / "tpu_compile.json").is_file()
