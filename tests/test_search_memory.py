"""The int8 search keeps a digest of each candidate it measured, not its bytes (quantize/search_candidates.py):
a 22M-parameter encoder's ~100 candidates once held 2.4 GB of models in memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import torch

import tpuedge
from tpuedge.quantize import search_candidates


class WideCancellation(torch.nn.Module):
    """A small signal carried next to a huge one and recovered by subtraction (as in
    test_quant_sensitivity.py), in several blocks: neither all-int8 nor int16 holds it, so the
    search measures many candidates, each with ~0.4 MB of int8 weights (on mcu, where no float
    island is allowed)."""

    def __init__(self, width: int = 192, depth: int = 4):
        super().__init__()
        self.big = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.small = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for big, small in zip(self.big, self.small):
            huge = big(x) * 1e5
            x = torch.layer_norm((huge + small(x)) - huge, x.shape[-1:])
        return torch.softmax(x, -1)


def test_the_search_does_not_keep_every_candidate_in_memory(tmp_path, monkeypatch):
    torch.manual_seed(0)
    program = tpuedge.export(WideCancellation().eval(), (torch.zeros(1, 192),), name="wide")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 192)).astype(np.float32)] for _ in range(24)]
    held: list[tuple[int, int]] = []  # (candidate bytes, memory traced while scoring it)
    score = search_candidates.score_candidate

    def traced_score(tflite, *args):
        held.append((len(tflite), tracemalloc.get_traced_memory()[0]))
        return score(tflite, *args)

    monkeypatch.setattr(search_candidates, "score_candidate", traced_score)
    tracemalloc.start()
    try:
        tpuedge.build(program, "mcu", tmp_path / "int8", calibration=calibration, allow_below_budget=True)
    finally:
        tracemalloc.stop()
    # the second half of the search: range estimation and its histograms are done, so what grows
    # is what each candidate leaves behind (old code: its whole model, 8 x 0.36 MB here)
    later = held[len(held) // 2 :]
    assert len(later) >= 5, held
    size = max(n for n, _ in later)
    growth = later[-1][1] - later[0][1]
    assert growth < size, f"memory grew {growth:,} B over {len(later)} candidates of {size:,} B"
