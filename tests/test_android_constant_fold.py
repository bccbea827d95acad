"""Android lowering folds what depends on no input (the fold-constants pass mcu runs too): a
positional encoding computed at run time from aranges (timm's EdgeNeXt) became int8 DIV/POW/SIN
ops whose divisor (10000 ** k, 1 to 10,000 on one int8 grid) rounds to zero, and LiteRT refused
the model."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.edge.tflite_inspect import summarize_tflite


class _FourierPositions(torch.nn.Module):
    """Tokens plus a sine positional encoding built in forward from aranges, as EdgeNeXt does."""

    def __init__(self, dim: int = 16, tokens: int = 8):
        super().__init__()
        self.dim, self.tokens, self.fc = dim, tokens, torch.nn.Linear(dim, dim)

    def forward(self, x):
        position = torch.arange(1, self.tokens + 1, dtype=torch.float32, device=x.device)[:, None]
        dim_t = torch.arange(self.dim, dtype=torch.float32, device=x.device)
        dim_t = 10000.0 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.dim)
        return self.fc(x + torch.sin(position / dim_t))


def test_a_positional_encoding_from_aranges_is_one_constant_on_android(tmp_path):
    """Old code: BudgetError, the int8 model stops LiteRT (div.cc: data[i] != zero_point)."""
    torch.manual_seed(0)
    program = tpuedge.export(_FourierPositions().eval(), (torch.zeros(1, 8, 16),), name="positions")
    calibration = [[x] for x in np.random.default_rng(0).standard_normal((32, 1, 8, 16)).astype(np.float32)]
    art = tpuedge.build(program, "android", tmp_path / "a", quantize="int8", strict_int8=True, calibration=calibration)
    ops = summarize_tflite((tmp_path / "a" / "model.tflite").read_bytes()).op_histogram
    assert not {"DIV", "POW", "SIN", "FLOOR_DIV"} & set(ops), ops
    assert art.manifest["accuracy_budget"]["met"]
