"""A FULLY_CONNECTED whose weights have one scale (a score head of one output: a beat tracker's,
a detector's) reads its bias's scale in TFLite-Micro's prepare (edge/mcu/data/tflm_ops.json,
"reads_bias_scale"): the mcu build keeps that bias's quantization table, so the layer prepares
whatever its multiplier, and the op data's claim is checked against the real interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.mcu.bias_quantization import drop_bias_quantization


def _narrow_head():
    """Linear(32 -> 1) over inputs near 0.5 with weights +-1 that cancel: outputs span ~0.16
    while input x weight steps are large, so its multiplier (input scale x weight scale / output
    scale, about 0.05) is over the 0.02 the kernel allows a bias of scale 0."""
    head = torch.nn.Linear(32, 1)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([1.0, -1.0] * 16)[None])
        head.bias.fill_(0.01)
    program = tpuedge.export(head.eval(), (torch.zeros(1, 32),), name="narrow_head")
    rng = np.random.default_rng(0)
    return program, [((0.5 + 0.01 * rng.standard_normal((1, 32))).astype(np.float32),) for _ in range(32)]


def _fc_bias(model):
    graph = model.subgraphs[0]
    names = tflite_file.operator_names(model)
    (op,) = [o for o in graph.operators if names[o.opcodeIndex] == "FULLY_CONNECTED"]
    return graph.tensors[int(op.inputs[1])], graph.tensors[int(op.inputs[2])]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    program, calibration = _narrow_head()
    out = tmp_path_factory.mktemp("mcu") / "narrow_head"
    return tpuedge.build(program, "mcu", out, calibration=calibration), out / "model.tflite"


def test_a_one_output_head_builds_and_runs_in_tflite_micro(built):
    art, path = built
    held_out = art.manifest["verification"]["held_out"]
    assert held_out["tflm_vs_litert_max_lsb"] <= 1
    assert held_out["tflm_vs_float"]["sample_cosine"] >= 0.99  # 0.9945 measured
    weights, bias = _fc_bias(tflite_file.read_model(path.read_bytes()))
    assert tflite_file.tensor_quantization(weights)[0].size == 1
    assert tflite_file.tensor_quantization(bias)[0].size == 1  # the table the kernel reads, kept


def test_the_kernel_refuses_that_bias_without_its_scale(built):
    """The op data's rule, on the interpreter: the same file with the bias's table taken away
    fails TFLite-Micro's prepare (kernel_util.cc: scale_diff / output_scale <= 0.02)."""
    from tpuedge.edge.mcu.tflm_runtime import TflmError, TflmRunner

    _, path = built
    model = tflite_file.read_model(path.read_bytes())
    assert drop_bias_quantization(model) == 0  # the rule keeps it
    _, bias = _fc_bias(model)
    bias.quantization = None
    with pytest.raises(TflmError) as refused:
        TflmRunner(tflite_file.write_model(model), 100_000).run_raw([np.zeros((1, 32), np.int8)])
    assert "scale_diff / output_scale <= 0.02" in str(refused.value) + refused.value.log


class _Int16Head(torch.nn.Module):
    """An outlier channel into a LayerNorm (the int8 search gives them 16-bit activations, as in
    tests/test_mcu_int16.py), then a one-output head whose weights cancel on its input."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.fc1, self.ln, self.fc2 = torch.nn.Linear(16, width), torch.nn.LayerNorm(width), torch.nn.Linear(width, 1)
        with torch.no_grad():
            self.fc1.weight[0] *= 400.0
            self.fc2.weight.copy_(torch.tensor([1.0, -1.0] * (width // 2))[None])
            self.fc2.weight[0, 0] = 0.0

    def forward(self, x):
        return self.fc2(self.ln(self.fc1(x)))


def test_a_one_output_head_at_16_bits_keeps_its_int64_bias_table(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_Int16Head().eval(), (torch.zeros(1, 16),), name="int16_head")
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((1, 16)).astype(np.float32),) for _ in range(32)]
    # its accuracy is not the point (held-out samples leave the outlier's calibrated range)
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration, allow_below_budget=True)
    # it prepared and ran in TFLite-Micro; its int16 output within 1/1000 of its range of LiteRT's (35 LSB measured)
    assert art.manifest["verification"]["held_out"]["tflm_vs_litert_max_lsb"] <= 64
    model = tflite_file.read_model((tmp_path / "mcu" / "model.tflite").read_bytes())
    graph, names = model.subgraphs[0], tflite_file.operator_names(model)
    heads = [op for op in graph.operators if names[op.opcodeIndex] == "FULLY_CONNECTED"][-1:]
    x, weights, bias = (graph.tensors[int(i)] for i in heads[0].inputs)
    assert (tflite_file.dtype_name(x.type), tflite_file.dtype_name(bias.type)) == ("int16", "int64")
    assert tflite_file.tensor_quantization(weights)[0].size == 1 == tflite_file.tensor_quantization(bias)[0].size
