"""Quantization-aware training deploys with every range trained on graphs whose int8 tensors
the converter reshapes: a strided depthwise Conv1d (an explicit PAD before it) with SiLU, and
attention, whose Linears on (1, tokens, features) become FULLY_CONNECTED ops that drop the
batch axis. Old code placed neither, so the builds stopped at exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge
import tpuedge.cloud
from tpuedge.quantize.activation_ranges import int8_affine


class SwishSignal(nn.Module):
    """A 1-D depthwise-separable block with SiLU, on MNIST-1D's signals."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv1d(1, 16, 5, padding=2)
        self.depthwise = nn.Conv1d(16, 16, 3, stride=2, padding=1, groups=16)
        self.pointwise = nn.Conv1d(16, 32, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.silu(self.stem(x))
        return self.head(F.silu(self.pointwise(F.silu(self.depthwise(x)))).mean(2))


class RowAttention(nn.Module):
    """Digits as 8 row tokens: embedding, one single-head self-attention block, mean, classifier."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))
        self.head = nn.Linear(width, 10)
        self.width = width

    def forward(self, rows):
        x = self.embed(rows)
        weights = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / self.width**0.5, dim=-1)
        return self.head((x + self.o(weights @ self.v(x))).mean(1))


def _signals():
    from train_to_mcu.mnist1d_data import mnist1d_split  # examples/ is on the path (conftest)

    return mnist1d_split()


def _digit_rows():
    from model import digits_split  # examples/digits/model.py

    x_train, y_train, x_test, y_test = digits_split()
    return x_train[:, 0], y_train, x_test[:, 0], y_test


def _float_trained(model_class, x_train, y_train, epochs: int = 25):
    """Float training in torch (fast here): QAT fine-tunes a trained model."""
    torch.manual_seed(0)
    model = model_class()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = torch.from_numpy(x_train), torch.from_numpy(y_train)
    order = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for batch in torch.randperm(len(x), generator=order).split(64):
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    return model.eval()


@pytest.mark.parametrize("model_class, data", [(SwishSignal, _signals), (RowAttention, _digit_rows)])
def test_qat_program_of_the_model_builds_for_mcu_with_every_range_trained(model_class, data, tmp_path):
    x_train, y_train, x_test, y_test = data()
    model = _float_trained(model_class, x_train, y_train)
    example = (torch.from_numpy(x_train[:64]), torch.from_numpy(y_train[:64]))
    step = tpuedge.cloud.train_step(
        model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-4), example, quantize="int8"
    )
    for i in range(0, len(x_train) - 63, 64):  # one epoch of QAT
        step(x_train[i : i + 64], y_train[i : i + 64])
    program = step.program(batch_size=1)
    artifact = tpuedge.build(
        program, "mcu", tmp_path / "mcu", eval=(x_test[:256], y_test[:256]), allow_below_budget=True
    )
    recipe = json.loads((tmp_path / "mcu" / "manifest.json").read_text())["quantization"]["recipe"]
    assert recipe["activation_ranges"]["tensors_without"] == []
    fake_quant = np.concatenate([step.quantized_outputs(x_test[i : i + 64])[0] for i in range(0, 256, 64)])
    tflm = np.concatenate([artifact.run(x_test[i : i + 1])[0] for i in range(256)])
    agreement = (tflm.argmax(1) == fake_quant.argmax(1)).mean()
    assert agreement >= 0.95, agreement
    if model_class is SwishSignal:  # every op's int8 arithmetic is reproduced (old eval: 74% identical)
        scale, _ = int8_affine(*program.activation_ranges.ranges["linear"])
        identical = (np.abs(tflm - fake_quant) / scale < 1e-3).mean()
        assert identical >= 0.99, identical


def test_per_layer_verify_compares_every_linear_of_attention(tmp_path):
    """The converter's FULLY_CONNECTED on (1, tokens, features) yields (tokens, features): per-layer
    verify puts the size-1 axis back and compares them (old code: none of the six Linears)."""
    from tpuedge.shared_ir.ir_values import ir_layers

    torch.manual_seed(0)
    program = tpuedge.export(RowAttention().eval(), (torch.zeros(1, 8, 8),), name="row_attention")
    artifact = tpuedge.build(program, "android", tmp_path / "android", quantize="none")
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    result = tpuedge.verify(artifact, program, [(s,) for s in x], per_layer=True, layer_samples=4)
    layers = ir_layers(program)
    compared = {l.node for l in result.layers.layers if layers[l.node].op == "aten.linear.default"}
    assert compared == {name for name, l in layers.items() if l.op == "aten.linear.default"}
    assert min(l.snr_db for l in result.layers.layers if l.node in compared) > 60.0  # a float build: exact
