"""Cross-layer equalization on the IR (shared_ir/passes/cross_layer_equalization.py), measured as
a candidate where all-int8 misses its target (quantize/precision_search.py).

The planted model computes a trained digits classifier, but its first convolution's output
channels span four decades (each rescaled, the next convolution's inputs rescaled back: the
same function). One int8 scale for that activation loses the small channels, which is what
happens to real networks whose channels differ in range."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.cross_layer_equalization import CrossLayerEqualization
from tpuedge.shared_ir.program import Program


class Planted(nn.Module):
    def __init__(self, norm: bool = False):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16) if norm else nn.Identity()
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 64, 10)

    def forward(self, x):
        return self.fc(F.relu(self.c2(F.relu(self.bn(self.c1(x))))).flatten(1))


@pytest.fixture(scope="module")
def planted():
    from model import digits_split  # examples/digits/model.py

    x_train, y_train, x_test, y_test = digits_split()
    torch.manual_seed(0)
    model = Planted()
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    for _ in range(4):
        for i in range(0, len(x_train), 64):
            optimizer.zero_grad()
            F.cross_entropy(
                model(torch.from_numpy(x_train[i : i + 64])), torch.from_numpy(y_train[i : i + 64])
            ).backward()
            optimizer.step()
    with torch.no_grad():  # channel i of c1's output times k_i, c2's input channel i divided by it
        k = torch.logspace(-2, 2, 16)
        model.c1.weight.mul_(k[:, None, None, None])
        model.c1.bias.mul_(k)
        model.c2.weight.div_(k[None, :, None, None])
    program = tpuedge.export(model.eval(), (torch.zeros(1, 1, 8, 8),), name="planted")
    return program, [(x_train[i : i + 1],) for i in range(64)], (x_test, y_test)


@pytest.mark.parametrize("norm", [False, True])
def test_equalization_keeps_the_function_and_levels_the_ranges(norm):
    torch.manual_seed(0)
    model = Planted(norm).eval()
    if norm:
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.data.uniform_(0.1, 3.0)
    program = tpuedge.export(model, (torch.zeros(1, 1, 8, 8),))
    ep, result = CrossLayerEqualization()(program.exported_program)
    assert result.changed == 1  # c1 -> relu -> c2; c2 -> relu -> flatten is not a pair
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(Program(ep, name="eq").run(x)[0], program.run(x)[0], rtol=1e-4, atol=1e-5)
    state = ep.state_dict
    gain = state["bn.weight"] / torch.sqrt(state["bn.running_var"] + 1e-5) if norm else torch.ones(16)
    r1 = state["c1.weight"].abs().amax((1, 2, 3)) * gain.abs()
    r2 = state["c2.weight"].abs().amax((0, 2, 3))
    torch.testing.assert_close(r1, r2, rtol=1e-5, atol=1e-7)
    assert program.exported_program.state_dict["c2.weight"] is not state["c2.weight"]  # the input program is untouched


def test_a_build_whose_all_int8_misses_takes_the_equalized_program(planted, tmp_path):
    """Old code: all-int8 scored 0.27 on the search's samples, and strict int8 (mcu's) stayed there."""
    program, calibration, evaluation = planted
    for target, options in (("android", {"quantize": "int8", "strict_int8": True}), ("mcu", {})):
        artifact = tpuedge.build(
            program, target, tmp_path / target, calibration=calibration, eval=evaluation, **options
        )
        recipe = artifact.manifest.get("recipe") or artifact.manifest["quantization"]["recipe"]
        report = recipe["cross_layer_equalization"]
        assert report["kept"] and report["all_int8_cosine_before"] < 0.5 < 0.999 < report["all_int8_cosine_equalized"]
        assert artifact.manifest["accuracy_budget"]["met"]
    result = tpuedge.verify(
        tmp_path / "android", program, [(x,) for x in evaluation[0][:8, None]], per_layer=True, layer_samples=4
    )
    assert min(l.snr_db for l in result.layers.layers) > 25  # compared against the equalized IR the build converted
