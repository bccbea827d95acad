"""The int8 search's IR sensitivity ranking is a build-cache stage (quantize/point_ranking.py): a
rebuild reads it back exactly instead of running every quantization point in JAX again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize.point_ranking import STAGE, ranked_points
from tpuedge.shared_ir.cache_keys import build_session


class ResidualMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        h = x + self.fc1(x)
        return self.head(h + self.fc2(torch.relu(h)))


@pytest.fixture(scope="module")
def program():
    torch.manual_seed(0)
    return tpuedge.export(ResidualMLP().eval(), (torch.zeros(1, 16),), name="residual")


def _samples(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, 16)).astype(np.float32)] for _ in range(count)]


def _ranked(program, calibration, measure):
    from tpuedge.edge.litert.litert_candidates import LiteRTCandidates
    from tpuedge.quantize.config import QuantConfig

    converter_program = LiteRTCandidates(program, QuantConfig(scheme="int8"), b"", None, target=None).converter_program
    with build_session() as session:
        ranking = ranked_points(program, calibration, measure, converter_program)
    return ranking, [(r.stage, r.outcome) for r in session.stages]


def test_a_rebuild_reads_the_ranking_back_exactly_and_other_samples_rank_again(program, cache_dir):
    calibration, measure = _samples(16, 0), _samples(2, 1)
    cold, cold_stages = _ranked(program, calibration, measure)
    assert cold_stages == [(STAGE, "miss")] and len(cold) >= 4
    assert [p.loss for p in cold] == sorted((p.loss for p in cold), reverse=True) and cold[0].loss > 0
    warm, warm_stages = _ranked(program, calibration, measure)
    assert warm_stages == [(STAGE, "hit")]
    assert warm == cold  # every field, the unrounded losses and ranges included
    # the key holds the calibration, which sets the ranges
    other, other_stages = _ranked(program, _samples(16, 5), measure)
    assert other_stages == [(STAGE, "miss")] and [p.high for p in other] != [p.high for p in cold]
