"""Samples tpuedge makes up when the user gives none (Program.example_inputs), and the cloud
export's self-check on them.

CANINE (HF, random init, attention mask): its cloud-tpu build stopped with an InternalError, the
exported forward "differing" from torch with max error NaN. The made-up samples held masks of
0..7 (integers were drawn from 0..7 whatever the input), (1 - 7) * float32.min overflowed, and
torch's own output was NaN at every element, as XLA's was.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize.metrics import max_abs_error


class _MaskedPool(torch.nn.Module):
    """Old-style HF additive mask: (1 - mask) * float32.min, then a softmax over the tokens."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.score = torch.nn.Linear(8, 1)

    def forward(self, ids, mask):
        h = self.embed(ids)
        logits = self.score(h).squeeze(-1) + (1.0 - mask.float()) * torch.finfo(torch.float32).min
        return (torch.softmax(logits, -1).unsqueeze(-1) * h).sum(1)


def _program():
    torch.manual_seed(0)
    ids = torch.tensor([[3, 17, 42, 8, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    return tpuedge.export(_MaskedPool().eval(), (ids, mask), name="masked_pool")


def test_made_up_integers_stay_in_the_range_of_the_export_example():
    samples = _program().example_inputs(seed=3, count=20)
    ids = np.stack([s[0] for s in samples])
    masks = np.stack([s[1] for s in samples])
    assert ids.min() >= 0 and ids.max() <= 42 and len(np.unique(ids)) > 10
    assert set(np.unique(masks)) == {0, 1}


def test_a_masked_model_builds_for_cloud_tpu_on_made_up_samples(tmp_path):
    artifact = tpuedge.build(_program(), "cloud-tpu", tmp_path / "cloud")
    assert float(artifact.manifest["verification"]["max_abs_error"]) < 1e-4


class _Log(torch.nn.Module):
    def forward(self, x):
        return torch.log(x) * 2.0


def test_nan_where_torch_has_nan_is_agreement_in_the_cloud_self_check(tmp_path):
    """log of normal samples: half NaN in torch and in XLA alike; the rest compared."""
    program = tpuedge.export(_Log().eval(), (torch.rand(2, 8) + 0.5,), name="log")
    artifact = tpuedge.build(program, "cloud-tpu", tmp_path / "cloud")
    assert float(artifact.manifest["verification"]["max_abs_error"]) < 1e-5


def test_max_abs_error_counts_one_sided_nan_as_infinite():
    ref = np.array([1.0, np.nan, np.inf, 2.0])
    assert max_abs_error(ref, np.array([1.0, np.nan, np.inf, 2.5])) == pytest.approx(0.5)
    assert max_abs_error(ref, np.array([1.0, 0.0, np.inf, 2.0])) == np.inf
    assert max_abs_error(ref, np.array([1.0, np.nan, -np.inf, 2.0])) == np.inf
