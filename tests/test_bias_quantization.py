"""mcu writes its integer biases without the per-channel quantization tables no TFLite-Micro
kernel reads (edge/mcu/bias_quantization.py): fewer bytes, the same outputs bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.mcu.bias_quantization import BIAS_INPUT, drop_bias_quantization


class _DepthwiseNet(torch.nn.Module):
    """conv + batch norm, depthwise conv, pointwise conv, linear: every bias per channel."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, padding=1, groups=16),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU6(),
            torch.nn.Conv2d(16, 32, 1),
            torch.nn.ReLU(),
        )
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def _biases(tflite: bytes) -> list[tuple[str, str, int]]:
    """(op, bias dtype, entries in the bias's scale table) of every op with a bias."""
    model = tflite_file.read_model(tflite)
    names, graph = tflite_file.operator_names(model), model.subgraphs[0]
    found = []
    for op in graph.operators:
        name = names[op.opcodeIndex]
        if name in BIAS_INPUT and len(op.inputs) > BIAS_INPUT[name] and op.inputs[BIAS_INPUT[name]] >= 0:
            bias = graph.tensors[op.inputs[BIAS_INPUT[name]]]
            found.append((name, tflite_file.dtype_name(bias.type), tflite_file.tensor_quantization(bias)[0].size))
    return found


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    module = _DepthwiseNet().eval()
    with torch.no_grad():
        for bn in (module.features[1], module.features[4]):
            bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2.0), bn.bias.uniform_(-0.3, 0.3)
    program = tpuedge.export(module, (torch.zeros(1, 3, 16, 16),), name="depthwise")
    rng = np.random.default_rng(0)
    return program, [(rng.standard_normal((1, 3, 16, 16)).astype(np.float32),) for _ in range(24)]


def test_mcu_biases_carry_no_quantization_table(net, tmp_path):
    program, calibration = net
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    biases = _biases((tmp_path / "mcu" / "model.tflite").read_bytes())
    assert [b[0] for b in biases] == ["CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "FULLY_CONNECTED"]
    # int32 beside int8 activations, int64 beside 16-bit ones (the search keeps every op at 16 bits here)
    assert all(
        dtype in ("int32", "int64") and entries == 0 for _, dtype, entries in biases
    )  # 16+16+32+10 entries before
    assert art.manifest["verification"]["held_out"]["tflm_vs_float"]["sample_cosine"] >= 0.99


def test_dropping_the_tables_changes_no_output_of_either_interpreter(net, tmp_path):
    """On android's int8 file (which keeps the tables for XNNPACK): TFLite-Micro and LiteRT's
    builtin kernels give the same bytes with and without them."""
    from litert_builtin import builtin_output
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    program, calibration = net
    tpuedge.build(program, "android", tmp_path / "android", calibration=calibration, quantize="int8")
    with_tables = (tmp_path / "android" / "model.tflite").read_bytes()
    assert all(entries > 1 for _, _, entries in _biases(with_tables))
    model = tflite_file.read_model(with_tables)
    dropped = drop_bias_quantization(model)
    without = tflite_file.write_model(model, external_from=with_tables)
    assert dropped == 4 and len(without) < len(with_tables) - 4 * 12  # 74 channels x (float32 + int64)
    assert all(entries == 0 for _, _, entries in _biases(without))

    for (x,) in calibration[:4]:
        reference = TflmRunner(with_tables, 200_000).run_raw([x])[0]
        np.testing.assert_array_equal(TflmRunner(without, 200_000).run_raw([x])[0], reference)
        np.testing.assert_array_equal(builtin_output(without, x), builtin_output(with_tables, x))


def test_a_model_without_integer_biases_is_left_as_it_was(net):
    from tpuedge.edge.litert.float_model import float_tflite

    program, _ = net
    tflite = float_tflite(program)
    model = tflite_file.read_model(tflite)
    assert drop_bias_quantization(model) == 0
    assert tflite_file.write_model(model) == tflite_file.write_model(tflite_file.read_model(tflite))
