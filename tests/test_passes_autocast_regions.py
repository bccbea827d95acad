"""Autocast regions inlined: a float32-pinned block (timm's EfficientViT, HF rotary embeddings)
is no longer one opaque `wrap_with_autocast` op that the mcu check refuses."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.autocast_regions import InlineAutocastRegions
from tpuedge.shared_ir.program import Program


class _PinnedSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = self.proj(x)
        with torch.autocast(device_type="cuda", enabled=False):  # as EfficientViT pins attention
            z = torch.softmax(y.float(), -1) * 2
        return z + 1


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_PinnedSoftmax().eval(), (torch.zeros(2, 6),), name="pinned")


def test_region_is_inlined_with_the_same_numbers():
    program = _program()
    assert any("wrap_with_autocast" in key for key in program.op_histogram)
    ep, result = InlineAutocastRegions()(program.exported_program)
    inlined = Program(ep, name="inlined")
    assert result.changed == 1 and not any("wrap_with_autocast" in key for key in inlined.op_histogram)
    assert inlined.op_histogram["aten.softmax.int"] == 1
    x = np.random.default_rng(0).normal(size=(2, 6)).astype(np.float32)
    np.testing.assert_array_equal(inlined.run(x)[0], program.run(x)[0])
    assert not any(name.startswith("submod") for name, _ in ep.graph_module.named_children())


def test_mcu_check_and_build_take_an_autocast_region(tmp_path):
    program = _program()
    assert program.check("mcu") == []
    rng = np.random.default_rng(0)
    calibration = [(rng.normal(size=(2, 6)).astype(np.float32),) for _ in range(40)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    assert artifact.manifest["rewrites"][0]["pass"] == "inline-autocast-regions"
