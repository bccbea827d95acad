"""Per-layer verify sees inside a 1-D convolutional net: the converter runs Conv1d as a 2-D
convolution on (N, 1, W, C) tensors, a size-1 axis put in and channels last, which the tensor
placement did not recognise (a keyword spotter or a wav2vec2 front end compared its output only)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge


class _AudioNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.front = torch.nn.Conv1d(1, 8, 5, stride=2, padding=2)
        self.depthwise = torch.nn.Conv1d(8, 8, 3, padding=1, groups=8)
        self.pointwise = torch.nn.Conv1d(8, 8, 1)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, wave):
        x = torch.relu(self.front(wave))
        x = torch.relu(self.pointwise(torch.relu(self.depthwise(x))))
        return self.head(x.mean(2))


def test_per_layer_verify_compares_the_layers_of_a_conv1d_net(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_AudioNet().eval(), (torch.zeros(1, 1, 64),), name="audio")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 1, 64)).astype(np.float32)] for _ in range(16)]
    for scheme, options in (
        ("none", {}),
        ("int8", {"calibration": calibration, "strict_int8": True, "allow_below_budget": True}),
    ):
        artifact = tpuedge.build(program, "android", tmp_path / scheme, quantize=scheme, **options)
        result = tpuedge.verify(
            artifact, program, [calibration[0][0]] * 2, per_layer=True, layer_samples=2, min_cosine=0.0
        )
        compared = {layer.node: layer for layer in result.layers.layers if not layer.is_input}
        # each convolution's output, its ReLU fused in (old code: the Linear head only)
        assert {"relu", "relu_1", "relu_2"} <= set(compared), (scheme, sorted(compared))
        assert result.layers.counterparts >= len(compared)
        if scheme == "none":
            assert min(layer.snr_db for layer in compared.values()) > 60, compared  # float: the same values
