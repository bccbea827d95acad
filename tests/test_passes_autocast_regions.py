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


class _NoGradPositions(torch.nn.Module):
    """HF Speech2Text's sinusoidal positions: a forward under @torch.no_grad() that picks rows of
    a table by positions counted from a mask."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(24, 8), persistent=False)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.no_grad():
            mask = torch.ones(x.shape[0], x.shape[1], dtype=torch.long)
            positions = torch.cumsum(mask, dim=1) * mask + 1
            picked = self.table.index_select(0, positions.view(-1)).view(x.shape[0], x.shape[1], -1)
        return self.fc(x + picked)


def _positions_program():
    torch.manual_seed(0)
    return tpuedge.export(_NoGradPositions().eval(), (torch.zeros(1, 6, 8),), name="no_grad_positions")


def test_a_no_grad_region_is_inlined_with_its_outputs_detached():
    from tpuedge.shared_ir.passes.autocast_regions import InlineGradModeRegions

    program = _positions_program()
    ep, result = InlineGradModeRegions()(program.exported_program)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert result.changed == 1 and not [t for t in targets if "wrap_with_set_grad_enabled" in t]
    assert "aten.detach.default" in targets and "aten.index_select.default" in targets
    x = np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)
    np.testing.assert_array_equal(Program(ep, name="inlined").run(x)[0], program.run(x)[0])


def test_mcu_checks_and_builds_what_a_no_grad_region_holds(tmp_path):
    """Old code: the check passed the region as one op and the build stopped at REDUCE_ALL and
    SELECT_V2 (the converter's index_select), which TFLite-Micro lacks."""
    program = _positions_program()
    assert not program.check("mcu")
    rng = np.random.default_rng(1)
    calibration = [[rng.standard_normal((1, 6, 8)).astype(np.float32)] for _ in range(16)]
    artifact = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration, board="nrf52840")  # strict int8
    assert "inline-grad-mode-regions" in [r["pass"] for r in artifact.manifest["rewrites"]]
