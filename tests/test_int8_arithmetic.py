"""The QAT eval computes int8 points with TFLite's kernel arithmetic (int32 bias, fixed-point
rescale with two roundings), so TFLite-Micro's int8 outputs are predicted value for value.

Rounding the float result instead differs from TFLite-Micro on 4% of a
residual CNN's output values and a quarter of a SiLU network's (tests/test_qat_graph_forms.py).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge
import tpuedge.cloud
from tpuedge.cloud.int8_arithmetic import requantize
from tpuedge.quantize.activation_ranges import int8_affine, quant_points


def _fixed_point_rescale(total: np.ndarray, multiplier: float) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier in 64-bit integers: Q31 multiplier, a rounding
    doubling high multiply (ties up), then a rounding right shift (ties away from zero)."""
    fraction, exponent = math.frexp(multiplier)
    q31 = round(fraction * 2**31)
    if q31 == 2**31:
        q31, exponent = q31 // 2, exponent + 1
    product = total.astype(np.int64) * (1 << max(exponent, 0)) * q31
    nudged = product + np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    high = np.sign(nudged) * (np.abs(nudged) >> 31)  # C's division truncates toward zero
    shift = max(-exponent, 0)
    mask = (1 << shift) - 1
    return (high >> shift) + ((high & mask) > ((mask >> 1) + (high < 0)))


def test_requantize_is_tflites_fixed_point_rescale():
    rng = np.random.default_rng(0)
    equal = total = 0
    for multiplier in np.exp(rng.uniform(math.log(1e-5), math.log(4.0), 100)).astype(np.float32):
        sums = rng.integers(-(2**15), 2**15, 2000)
        got = np.asarray(requantize(jnp.asarray(sums, jnp.float32), multiplier))
        want = _fixed_point_rescale(sums, float(multiplier))
        assert np.abs(got - want).max() <= 1
        equal += int((got == want).sum())
        total += sums.size
    # float32 keeps 24 bits of the product; rounding x * m once differs on ~3% of these
    assert equal / total >= 0.999, equal / total


class ResidualCNN(nn.Module):
    """conv + relu, a residual ADD with a fused relu, a spatial MEAN, a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        return self.head(F.relu(x + self.b(F.relu(self.a(x)))).mean((2, 3)))


def test_kernels_are_read_off_the_ir():
    program = tpuedge.export(ResidualCNN().eval(), (torch.zeros(1, 1, 8, 8),))
    kernels = quant_points(program).kernels
    assert {p: (k.kind, k.clamp) for p, k in kernels.items()} == {
        "relu": ("weighted", (0.0, None)),
        "relu_1": ("weighted", (0.0, None)),
        "conv2d_2": ("weighted", None),
        "relu_2": ("add", (0.0, None)),
        "mean": ("mean", None),
        "linear": ("weighted", None),
    }
    assert kernels["relu_2"].grids == ("relu", "conv2d_2") and kernels["mean"].dims == (2, 3)
    assert kernels["linear"].channel_axis == -1 and kernels["linear"].bias == "head.bias"
    pooled = tpuedge.export(
        nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1)).eval(), (torch.zeros(1, 1, 8, 8),)
    )
    pool = quant_points(pooled).kernels["adaptive_avg_pool2d"]
    assert (pool.kind, pool.dims, pool.grids) == ("mean", (2, 3), ("relu",))


def test_ops_on_constants_alone_are_not_quantization_points():
    """An LSTM's two biases summed are one int32 bias in the int8 graph (the converter folds
    the ADD); old code made the sum a point, so QAT rounded that bias to int8."""
    from tpuedge.cloud.qat import _rewritten

    lstm = nn.LSTM(8, 16, batch_first=True)
    program = _rewritten(tpuedge.export(lstm.eval(), (torch.zeros(1, 4, 8),)), "mcu")
    plan = quant_points(program)
    nodes = {n.name: n for n in program.exported_program.graph.nodes}
    projection = next(k for k in plan.kernels.values() if k.kind == "weighted" and k.bias in nodes)
    assert projection.bias not in plan.points  # the folded bias, read as it is
    params = {s.arg.name for s in program.exported_program.graph_signature.input_specs if s.arg.name != "input"}
    assert not [
        p
        for p in plan.points
        if p in nodes and nodes[p].op == "call_function" and all(a.name in params for a in nodes[p].all_input_nodes)
    ]


def test_what_an_integer_input_reaches_is_quantized():
    """Token ids are no quantization point, but the embedding they look up and all after it are
    (old code counted an integer input as a constant, so a text encoder had no points at all:
    the android int8 ranking of MiniLM-L6 found nothing, and its build fell below its budget)."""

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.fc = nn.Embedding(50, 8), nn.Linear(8, 4)

        def forward(self, ids):
            return self.fc(torch.relu(self.embed(ids)))

    program = tpuedge.export(Encoder().eval(), (torch.zeros(1, 6, dtype=torch.long),))
    plan = quant_points(program)
    targets = {n.name: str(n.target) for n in program.exported_program.graph.nodes}
    assert [targets[p] for p in plan.points] == ["aten.embedding.default", "aten.relu.default", "aten.linear.default"]
    assert plan.weights == {"fc.weight": 0}


def test_qat_eval_predicts_tflite_micro_value_for_value(tmp_path):
    from model import digits_split  # examples/digits/model.py

    x_train, y_train, x_test, y_test = digits_split()
    torch.manual_seed(0)
    model = ResidualCNN()
    example = (torch.from_numpy(x_train[:64]), torch.from_numpy(y_train[:64]))
    step = tpuedge.cloud.train_step(
        model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-3), example, quantize="int8"
    )
    for _ in range(3):
        for i in range(0, len(x_train) - 63, 64):
            step(x_train[i : i + 64], y_train[i : i + 64])
    program = step.program(batch_size=1)
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", eval=(x_test, y_test), allow_below_budget=True)
    n = 192
    predicted = np.concatenate([step.quantized_outputs(x_test[i : i + 64])[0] for i in range(0, n, 64)])
    tflm = np.concatenate([artifact.run(x_test[i : i + 1].transpose(0, 2, 3, 1))[0] for i in range(n)])
    scale, _ = int8_affine(*program.activation_ranges.ranges["linear"])
    steps_off = np.abs(tflm - predicted) / scale
    assert (steps_off < 1e-3).mean() >= 0.999, (
        f"identical on {(steps_off < 1e-3).mean():.4f}, max {steps_off.max():.1f} steps"
    )
