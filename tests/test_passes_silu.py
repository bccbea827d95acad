"""The SiLU pass: x * sigmoid(x) on the IR, the two int8 ops the converter lowers SiLU to, so
the int8 decision on the IR, quantization-aware training and per-layer verify see the sigmoid's
own int8 tensor; exact in float, and the TFLite-Micro build is unchanged in kind."""

from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.quantize.activation_ranges import FIXED_RANGES, quant_points
from tpuedge.shared_ir.passes.silu_form import SiluAsSigmoidMul
from tpuedge.shared_ir.program import Program
from tpuedge.shared_ir.targets import get_target


class _SwishBlock(torch.nn.Module):
    """EfficientNet's activation after a strided depthwise conv (1-D), then a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv1d(1, 8, 5, padding=2)
        self.depthwise = torch.nn.Conv1d(8, 8, 3, stride=2, padding=1, groups=8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.head(F.silu(self.depthwise(F.silu(self.stem(x)))).mean(2))


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_SwishBlock().eval(), (torch.zeros(1, 1, 24),), name="swish")


def test_silu_becomes_x_times_sigmoid_x_with_the_same_numbers():
    program = _program()
    ep, result = SiluAsSigmoidMul()(program.exported_program)
    rewritten = Program(ep, name="swish")
    assert result.changed == 2 and "aten.silu.default" not in rewritten.op_histogram
    assert rewritten.op_histogram["aten.sigmoid.default"] == 2
    for seed in range(3):
        x = 3 * np.random.default_rng(seed).standard_normal((1, 1, 24)).astype(np.float32)
        np.testing.assert_allclose(rewritten.run(x)[0], program.run(x)[0], rtol=1e-6, atol=1e-6)
    stack = [n.meta.get("stack_trace", "") for n in ep.graph.nodes if n.target == torch.ops.aten.sigmoid.default]
    assert stack and all("silu" in s for s in stack)  # errors still point at the user's line


def test_the_sigmoid_inside_silu_is_an_int8_point_with_the_kernels_fixed_range():
    """Old code: the mcu rewrites left silu whole, so no point stood for LOGISTIC's int8 output."""
    rewritten = Program(get_target("mcu").capability().rewrite(_program().exported_program), name="swish")
    plan = quant_points(rewritten)
    gates = [p for p in plan.points if p.startswith("sigmoid")]
    assert len(gates) == 2 and all(plan.fixed[g] == FIXED_RANGES["aten.sigmoid.default"] for g in gates)


def test_mcu_build_of_silu_has_logistic_and_mul_and_meets_its_budget(tmp_path):
    program = _program()
    cal = np.random.default_rng(0).standard_normal((40, 1, 1, 24)).astype(np.float32)
    tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=[[c] for c in cal])
    manifest = json.loads((tmp_path / "mcu" / "manifest.json").read_text())
    assert manifest["accuracy_budget"]["met"]
    rewrite = next(r for r in manifest["rewrites"] if r["pass"] == "silu-as-sigmoid-mul")
    assert rewrite["changed"] == 2 and rewrite["accuracy_cost_vs_original_float"]["max_abs_error"] < 1e-5
    assert {"LOGISTIC", "MUL"} <= {op["op"] for op in manifest["tflm_ops"]}


class _SiluThroughAView(torch.nn.Module):
    """An in-place SiLU on a slice: it writes into the tensor the slice views."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        F.silu(y[:, :2], inplace=True)
        return y * 2.0


def test_an_in_place_silu_through_a_view_keeps_its_write():
    """Old code rewrote `silu_` as a new x * sigmoid(x) value, so `y` never saw the write: the
    android float model was off by up to 3.9 against torch, with no error."""
    from tpuedge.edge.litert.litert_lowering import lower_to_float_flatbuffer
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    torch.manual_seed(0)
    module = _SiluThroughAView().eval()
    x = torch.randn(1, 3, 4, 4)
    program = tpuedge.export(module, (x,), name="silu_view")
    assert SiluAsSigmoidMul()(program.exported_program)[1].changed == 0
    with torch.no_grad():
        want = module(x).numpy()
    got = LiteRTRunner(lower_to_float_flatbuffer(program)).run([x.numpy()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
