"""Tensor names in built .tflite files are litert-torch's module scopes without the Python class
paths: the bytes go, and per-layer verify, which compares class and attribute names only, still
places every tensor."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.edge import tflite_file
from tpuedge.edge.tensor_names import short_tensor_name, shorten_tensor_names


def test_a_name_keeps_its_distinct_scopes_shortened_in_order():
    fused = "pkg.models.Net/torch.nn.modules.conv.Conv2d_conv;pkg.models.Net/torch.nn.modules.conv.Conv2d_conv;;3;pkg.models.Net/torch.nn.modules.activation.ReLU_act"
    assert short_tensor_name(fused) == "Net/Conv2d_conv;Net/ReLU_act"
    assert short_tensor_name("test_tensor_names._Net;1") == "_Net"


def test_short_names_stay_unique_and_the_quantizer_takes_them(tmp_path):
    """A Linear's weight and output both shorten to "_Net/Linear_fc": the second gets ";1" (a
    part verify skips). With repeated names ai-edge-quantizer refused our float model."""
    from tpuedge.edge.quantizer_recipes import quantizer_recipe, run_quantizer
    from tpuedge.quantize.config import QuantConfig

    torch.manual_seed(0)
    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="named")
    tpuedge.build(program, "android", tmp_path / "float", quantize="none")
    data = (tmp_path / "float" / "model.tflite").read_bytes()
    names = _names(data)
    assert len(set(names)) == len(names) and any(n.endswith(";1") for n in names), names
    quantize = run_quantizer(data)
    recipe = quantizer_recipe(QuantConfig(scheme="int8"))
    quantize.calibrate(recipe, [{"x": np.full((1, 3, 8, 8), i, np.float32)} for i in range(4)])
    assert len(quantize(recipe)) > 0
    for plain in ("serving_default_x", "StatefulPartitionedCall:0", "7"):
        assert short_tensor_name(plain) == plain


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x)) + x


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.blocks = torch.nn.Sequential(_Block(), _Block())
        self.head = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def _names(data: bytes) -> list[str]:
    return [tflite_file.text(t.name) for t in tflite_file.read_model(data).subgraphs[0].tensors]


def test_android_and_mcu_builds_write_short_names_and_verify_still_places_layers(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="named")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(16)]
    for target, options in (("android", {"quantize": "int8"}), ("mcu", {"board": "esp32s3"})):
        artifact = tpuedge.build(program, target, tmp_path / target, calibration=calibration, **options)
        data = (tmp_path / target / "model.tflite").read_bytes()
        names = _names(data)
        assert not [n for n in names if "torch.nn.modules" in n or "test_tensor_names" in n], names
        assert any("_Block_0/Conv2d_conv" in n for n in names), names
        assert len(set(names)) == len(names)  # ai-edge-quantizer refuses repeated names
        assert shorten_tensor_names(data) is data  # already short
        x = calibration[0][0]
        result = tpuedge.verify(artifact, program, [x] * 2, per_layer=True, layer_samples=2)
        compared = [l.node for l in result.layers.layers if not l.is_input]
        # the same nodes as with the converter's full names (measured on both targets)
        assert compared == ["conv2d", "relu", "add", "relu_1", "add_1", "mean", "linear"], (target, compared)


def test_the_float_model_comes_out_short_named_and_a_float_build_writes_it_as_it_is(tmp_path):
    """Names are shortened once, where litert-torch's float model is made: every scheme
    quantizes from that model, so a float build writes those very bytes (old code renamed a copy
    per build, and an int8 build packed the float model again to report its size)."""
    from tpuedge.edge.float_model import float_tflite
    from tpuedge.edge.litert_lowering import lower_to_float_flatbuffer

    torch.manual_seed(0)
    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="sized")
    converter_names = lower_to_float_flatbuffer(program)
    base = float_tflite(program, cache=False)
    assert base == shorten_tensor_names(converter_names) and len(base) < len(converter_names)
    assert shorten_tensor_names(base) is base
    art = tpuedge.build(program, "android", tmp_path / "f", quantize="none")
    assert (tmp_path / "f" / "model.tflite").read_bytes() == base
    assert art.manifest["sizes"]["float_tflite_bytes"] == len(base)


def test_repeated_scopes_get_the_first_free_suffix_and_a_short_named_model_is_not_unpacked(tmp_path, monkeypatch):
    """An unrolled recurrent layer gives thousands of tensors one scope: each repeat gets the first
    free ";k" (as the one-by-one search gave, without its quadratic cost), and a model whose names
    are short already is returned as it is from its names read in place: unpacking Resemblyzer's
    object tree (10k tensors) took a second, twice per float build."""
    from tpuedge.edge.tensor_names import _unique_short_names

    scope = "pkg.Net/torch.nn.modules.rnn.LSTM_lstm"
    names = [scope, f"{scope};7", "Net/LSTM_lstm;2", scope, "serving_default_x", scope]
    assert _unique_short_names(names) == ["Net/LSTM_lstm", "Net/LSTM_lstm;1", "Net/LSTM_lstm;2", "Net/LSTM_lstm;3",
                                          "serving_default_x", "Net/LSTM_lstm;4"]

    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="named")
    tpuedge.build(program, "android", tmp_path / "float", quantize="none")
    data = (tmp_path / "float" / "model.tflite").read_bytes()

    def unpacked(*args, **kwargs):
        raise AssertionError("the model was unpacked to find nothing to rename")

    monkeypatch.setattr(tflite_file, "read_model", unpacked)
    assert shorten_tensor_names(data) is data
