"""The hardsigmoid pass: relu6(x + 3) / 6 on the IR, so squeeze-excitation gates (MobileNetV3)
build for mcu; exact in float, and the TFLite-Micro build meets its budget."""

from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.hardsigmoid import HardSigmoidAsRelu6
from tpuedge.shared_ir.program import Program


class _SqueezeExcite(torch.nn.Module):
    """MobileNetV3's block in small: conv, a hardsigmoid gate from pooled features, a lone one."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc1, self.fc2 = torch.nn.Conv2d(8, 4, 1), torch.nn.Conv2d(4, 8, 1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = F.hardswish(self.conv(x))
        gate = F.hardsigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return F.hardsigmoid(self.head((y * gate).mean((2, 3))) * 4.0)  # a gate not after a layer


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_SqueezeExcite().eval(), (torch.zeros(1, 3, 12, 12),), name="se")


def test_hardsigmoid_becomes_relu6_of_x_plus_3_over_6_with_the_same_numbers():
    program = _program()
    assert program.op_histogram["aten.hardsigmoid.default"] == 2
    ep, result = HardSigmoidAsRelu6()(program.exported_program)
    rewritten = Program(ep, name="se")
    assert result.changed == 2 and "aten.hardsigmoid.default" not in rewritten.op_histogram
    for seed in range(3):  # wide inputs: both clamps are hit
        x = 4 * np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype(np.float32)
        np.testing.assert_allclose(rewritten.run(x)[0], program.run(x)[0], rtol=1e-6, atol=1e-6)
    stack = [n.meta.get("stack_trace", "") for n in ep.graph.nodes if n.target == torch.ops.aten.hardtanh.default]
    assert stack and all("hardsigmoid" in s for s in stack)  # errors still point at the user's line


def test_mcu_check_and_tflm_build_take_hardsigmoid(tmp_path):
    """Old code: `aten.hardsigmoid.default (x2): mcu has no lowering for this op`."""
    program = _program()
    assert program.check("mcu") == []
    cal = np.random.default_rng(0).standard_normal((40, 1, 3, 12, 12)).astype(np.float32)
    tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=[[c] for c in cal])
    manifest = json.loads((tmp_path / "mcu" / "manifest.json").read_text())
    assert manifest["accuracy_budget"]["met"]
    rewrite = next(r for r in manifest["rewrites"] if r["pass"] == "hardsigmoid-as-relu6")
    assert rewrite["changed"] == 2 and rewrite["accuracy_cost_vs_original_float"]["max_abs_error"] < 1e-5
    assert "RELU6" not in json.dumps(manifest["tflm_ops"])  # fused: no lone RELU6 (the quantizer keeps it float)
