"""mcu layout: NHWC image inputs by default (no TRANSPOSE in the model), NCHW on request, the
same numbers either way; a flatten into a Linear reads NHWC with its weight permuted."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.flatten_nhwc import FlattenAsNHWC
from tpuedge.shared_ir.program import Program


class _SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(F.relu(self.conv2(F.relu(self.conv1(x)))).flatten(1))


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    program = tpuedge.export(_SmallCNN().eval(), (torch.zeros(1, 3, 8, 8),), name="small_cnn")
    rng = np.random.default_rng(0)
    cal = [(rng.standard_normal((1, 3, 8, 8)).astype(np.float32),) for _ in range(32)]
    return program, cal


def test_flatten_reads_nhwc_with_the_same_outputs(cnn):
    program, cal = cnn
    ep, result = FlattenAsNHWC()(program.exported_program)
    assert result.changed == 1
    rewritten = Program(ep, name="small_cnn")
    assert rewritten.op_histogram["aten.permute.default"] == 1
    for (x,) in cal[:4]:
        np.testing.assert_allclose(program.run(x)[0], rewritten.run(x)[0], rtol=1e-5, atol=1e-5)
    weight = program.exported_program.state_dict["fc.weight"]
    assert not torch.equal(ep.state_dict["fc.weight"], weight)  # the copy's weight, permuted
    assert torch.equal(program.exported_program.state_dict["fc.weight"], weight)  # the original untouched


def test_a_flatten_that_reads_nhwc_already_is_left_alone(cnn):
    """Every LiteRT lowering runs the pass after mcu's own passes ran it: a second run must find
    nothing (a second permutation of the permuted map would permute the Linear's weight again)."""
    program, _ = cnn
    once, _ = FlattenAsNHWC()(program.exported_program)
    twice, result = FlattenAsNHWC()(once)
    assert result.changed == 0 and twice is once


@pytest.mark.parametrize("channels_last", [True, False])
def test_mcu_layout_default_nhwc_and_nchw_on_request(cnn, tmp_path, channels_last):
    program, cal = cnn
    options = {} if channels_last else {"channels_last": False}
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal, **options)
    m = art.manifest
    ops = {o["op"]: o["count"] for o in m["tflm_ops"]}
    io_shape = m["quantization"]["io"]["inputs"][0]["shape"]
    if channels_last:
        assert "TRANSPOSE" not in ops and m["layout"] == "NHWC"
        assert io_shape == [1, 8, 8, 3] and m["inputs"][0]["shape"] == [1, 8, 8, 3]
    else:
        assert ops.get("TRANSPOSE") == 1 and m["layout"] == "as exported"  # the input's NCHW -> NHWC
        assert io_shape == [1, 3, 8, 8] and m["inputs"][0]["shape"] == [1, 3, 8, 8]
    # measured in TFLite-Micro against the float IR (3 channels: a layout mix-up scrambles it)
    check = m["verification"]["held_out"]
    assert check["tflm_vs_float"]["centered_cosine"] > 0.98 and check["tflm_vs_litert_max_lsb"] <= 1
    x = cal[0][0]
    got = art.run(x.transpose(0, 2, 3, 1) if channels_last else x)[0]
    ref = program.run(x)[0]
    assert np.abs(got - ref).max() < 0.1 * np.abs(ref).max()


def test_mcu_artifact_takes_the_models_own_layout(cnn, tmp_path):
    """`tpuedge.load(dir).run(x)` with the NCHW array the model was exported with: transposed on
    the host to the NHWC the device takes; an NHWC array is taken as it is; any other shape is one
    error naming both layouts."""
    from tpuedge.shared_ir.errors import UserError

    program, cal = cnn
    tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=cal)
    art = tpuedge.load(tmp_path / "mcu")
    assert [list(s.shape) for s in art.inputs] == [[1, 8, 8, 3]]  # the device's (and the C header's) layout
    assert [list(s.shape) for s in art.ir_inputs] == [[1, 3, 8, 8]]
    header = (tmp_path / "mcu" / "model_data.h").read_text()  # the device's side, documented where it is used
    x_io = art.manifest["quantization"]["io"]["inputs"][0]
    assert (
        f"// input 0 ({x_io['name']}): int8[1, 8, 8, 3], NHWC (the model was exported NCHW [1, 3, 8, 8]: "
        f"transpose before quantizing), real = scale * (q - zero_point) with scale {x_io['scale']:.9g}"
    ) in header
    assert "// output 0 (" in header and "int8[1, 5]" in header
    x = cal[1][0]
    from_nchw = art.run(x)[0]
    np.testing.assert_array_equal(from_nchw, art.run(x.transpose(0, 2, 3, 1))[0])
    np.testing.assert_array_equal(from_nchw, art.run(torch.from_numpy(x))[0])
    ref = program.run(x)[0]
    assert np.abs(from_nchw - ref).max() < 0.1 * np.abs(ref).max()
    with pytest.raises(UserError, match=r"takes \[1, 3, 8, 8\] .*NCHW.* or \[1, 8, 8, 3\] \(NHWC"):
        art.run(np.zeros((1, 8, 3, 8), np.float32))
