"""Tensor names in built .tflite files are module scopes, each module's qualified name and class
("blocks.0.conv/Conv2d"), where litert-torch writes the chain of modules with their Python class
paths: the bytes go, and per-layer verify, which reads names as scopes, still places every tensor."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.edge.flatbuffer.tensor_names import ScopeNames, shorten_tensor_names


def test_a_name_keeps_its_distinct_scopes_in_order():
    """The converter's chains (full class paths), the class-name chains older builds wrote and
    scopes already written all come out as the program's module scopes; a chain the program does
    not hold keeps its class names."""
    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="named")
    scopes = ScopeNames(program.exported_program)
    block = "test_tensor_names._Net/torch.nn.modules.container.Sequential_blocks/test_tensor_names._Block_0"
    fused = f"{block}/torch.nn.modules.conv.Conv2d_conv;{block}/torch.nn.modules.conv.Conv2d_conv;;3;{block}/torch.nn.modules.activation.ReLU_act"
    assert scopes.name(fused) == "blocks.0.conv/Conv2d;blocks.0.act/ReLU"
    assert scopes.name("_Net/Sequential_blocks/_Block_1/Conv2d_conv;2") == "blocks.1.conv/Conv2d"
    assert scopes.name("blocks.1.conv/Conv2d;head/Linear") == "blocks.1.conv/Conv2d;head/Linear"
    assert scopes.name("test_tensor_names._Net;1") == "_Net"
    assert scopes.name("pkg.Other/torch.nn.modules.linear.Linear_fc") == "Other/Linear_fc"
    assert scopes.scopes(f"{block}/torch.nn.modules.conv.Conv2d_conv;7") == {"blocks.0.conv/Conv2d"}


def test_a_tensor_the_quantizer_added_is_read_in_its_source_scope():
    """ai-edge-quantizer names the int8 copy of a float tensor "<name>_quantized" and the float
    copy of an int8 one "<name>_dequant". Old code read "blocks.0.act/ReLU_quantized" as a class
    path and cut it to "act/ReLU_quantized", a scope no node has, alike for every block."""
    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="named")
    scopes = ScopeNames(program.exported_program)
    assert scopes.scopes("blocks.0.act/ReLU_quantized") == {"blocks.0.act/ReLU"}
    assert scopes.name("blocks.1.act/ReLU_quantized") == "blocks.1.act/ReLU_quantized"
    assert scopes.name("blocks.0.conv/Conv2d;12_dequant") == "blocks.0.conv/Conv2d_dequant"
    assert scopes.scopes("blocks.0.conv/Conv2d;blocks.0.act/ReLU;3_dequant") == {
        "blocks.0.conv/Conv2d",
        "blocks.0.act/ReLU",
    }
    assert scopes.name("serving_default_output_0_output_dequant") == "serving_default_output_0_output_dequant"


def test_short_names_stay_unique_and_the_quantizer_takes_them(tmp_path):
    """A Linear's weight and output both shorten to "_Net/Linear_fc": the second gets ";1" (a
    part verify skips). With repeated names ai-edge-quantizer refused our float model."""
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
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
        assert ScopeNames(program.exported_program).name(plain) == plain


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
        assert not [n for n in names if "torch.nn.modules" in n or "test_tensor_names" in n or "_Block_" in n], names
        assert any(n.startswith("blocks.0.conv/Conv2d") for n in names), names
        # a quantized model's tensors of one scope share its name (nothing quantizes it again)
        assert len(set(names)) < len(names) and not [n for n in names if n.rsplit(";", 1)[-1].isdigit()], names
        assert shorten_tensor_names(data, ScopeNames(program.exported_program), unique=False) is data  # already scopes
        x = calibration[0][0]
        result = tpuedge.verify(artifact, program, [x] * 2, per_layer=True, layer_samples=2)
        compared = [l.node for l in result.layers.layers if not l.is_input]
        # the same nodes as with the converter's full names (measured on both targets)
        assert compared == ["conv2d", "relu", "add", "relu_1", "add_1", "mean", "linear"], (target, compared)


def test_the_float_model_comes_out_short_named_and_a_float_build_writes_it_as_it_is(tmp_path):
    """Names are shortened once, where litert-torch's float model is made: every scheme
    quantizes from that model, so a float build writes those very bytes (old code renamed a copy
    per build, and an int8 build packed the float model again to report its size)."""
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.litert_lowering import lower_to_float_flatbuffer

    torch.manual_seed(0)
    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="sized")
    converter_names = lower_to_float_flatbuffer(program)
    base = float_tflite(program, cache=False)
    scopes = ScopeNames(program.exported_program)
    # renamed where the converter's names lay (a float model is not repacked): no byte more
    assert base == shorten_tensor_names(converter_names, scopes) and len(base) == len(converter_names)
    assert tflite_file.tensor_names(base) != tflite_file.tensor_names(converter_names)
    assert shorten_tensor_names(base, scopes) is base
    art = tpuedge.build(program, "android", tmp_path / "f", quantize="none")
    assert (tmp_path / "f" / "model.tflite").read_bytes() == base
    assert art.manifest["sizes"]["float_tflite_bytes"] == len(base)


def test_repeated_scopes_get_the_first_free_suffix_and_a_short_named_model_is_not_unpacked(tmp_path, monkeypatch):
    """An unrolled recurrent layer gives thousands of tensors one scope: each repeat gets the first
    free ";k" (as the one-by-one search gave, without its quadratic cost), and a model whose names
    are short already is returned as it is from its names read in place: unpacking Resemblyzer's
    object tree (10k tensors) took a second, twice per float build."""
    from tpuedge.edge.flatbuffer.tensor_names import _unique_names

    program = tpuedge.export(_Net().eval(), (torch.zeros(1, 3, 8, 8),), name="named")
    scopes = ScopeNames(program.exported_program)
    scope = "test_tensor_names._Net/torch.nn.modules.linear.Linear_head"
    names = [scope, f"{scope};7", "head/Linear;2", scope, "serving_default_x", scope]
    assert _unique_names(names, scopes) == [
        "head/Linear",
        "head/Linear;1",
        "head/Linear;2",
        "head/Linear;3",
        "serving_default_x",
        "head/Linear;4",
    ]

    tpuedge.build(program, "android", tmp_path / "float", quantize="none")
    data = (tmp_path / "float" / "model.tflite").read_bytes()

    def unpacked(*args, **kwargs):
        raise AssertionError("the model was unpacked to find nothing to rename")

    monkeypatch.setattr(tflite_file, "read_model", unpacked)
    assert shorten_tensor_names(data, scopes) is data


class _TwoLists(torch.nn.Module):
    """The root iterates two ModuleLists: litert-torch names depthwise[0] and pointwise[0] alike
    ("_TwoLists/Conv1d_0"), so renaming its names could not tell them apart."""

    def __init__(self):
        super().__init__()
        self.depthwise = torch.nn.ModuleList(torch.nn.Conv1d(4, 4, 3, padding=1, groups=4) for _ in range(2))
        self.pointwise = torch.nn.ModuleList(torch.nn.Conv1d(4, 4, 1) for _ in range(2))

    def forward(self, x):
        for depthwise, pointwise in zip(self.depthwise, self.pointwise):
            x = torch.relu(pointwise(torch.relu(depthwise(x))))
        return x


def test_modules_the_converter_names_alike_get_their_own_names():
    """Renaming the converter's chains named every pointwise tensor after the depthwise module
    its chain also names (first found): an mcu build on trained activation ranges then found no
    range for them (the train-to-mcu example's SwishDSCNN). litert-torch is handed the scopes."""
    from tpuedge.edge.litert.float_model import float_tflite

    program = tpuedge.export(_TwoLists().eval(), (torch.zeros(1, 4, 16),), name="lists")
    names = _names(float_tflite(program, cache=False))
    for i in (0, 1):
        assert f"_TwoLists;depthwise.{i}/Conv1d" in names and f"_TwoLists;pointwise.{i}/Conv1d" in names, names
    assert ScopeNames(program.exported_program).name("_TwoLists/Conv1d_0") == "_TwoLists/Conv1d_0"  # two modules: kept


def _renamed_net() -> torch.nn.Module:
    """_Net with its block class renamed: the same graph, parameter names and weights."""

    class _Stage(_Block):
        pass

    torch.manual_seed(0)
    weights = _Net().state_dict()  # what the test's seeded _Net() holds
    net = _Net()
    net.blocks = torch.nn.Sequential(*(_Stage() for _ in range(2)))
    net.load_state_dict(weights)
    return net


def test_a_cache_hit_carries_the_names_a_cold_build_writes(tmp_path, monkeypatch):
    """The IR fingerprint leaves module stacks out: a model whose class was renamed got its float
    model, and so its tensor names, from the old class's entry (in the process's memo and on
    disk), bytes no cold build of it writes. Both keys now cover the names' scopes."""
    from tpuedge.edge.litert.float_model import float_tflite

    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TPUEDGE_NO_CACHE", raising=False)
    x = (torch.zeros(1, 3, 8, 8),)
    renamed = tpuedge.export(_renamed_net().eval(), x, name="named")
    torch.manual_seed(0)
    first = tpuedge.export(_Net().eval(), x, name="named")
    assert renamed.fingerprint == first.fingerprint
    tpuedge.build(first, "android", tmp_path / "first", quantize="none")
    tpuedge.build(renamed, "android", tmp_path / "renamed", quantize="none")
    cold = float_tflite(renamed, cache=False)
    assert any("/_Stage" in n for n in _names(cold)), _names(cold)
    assert (tmp_path / "renamed" / "model.tflite").read_bytes() == cold
