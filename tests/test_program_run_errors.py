"""Samples the model itself refuses (a token id past its embedding table) are the user's data
problem: a UserError naming the inputs' value ranges, not torch's bare IndexError.

Found by a tiny HF ESM encoder (vocabulary 33) calibrated with ids up to 99: its android int8
build stopped with "IndexError: index out of range in self" from the float reference run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.errors import UserError


class _Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.embed(ids).mean(1))


@pytest.fixture(scope="module")
def program():
    torch.manual_seed(0)
    return tpuedge.export(_Tagger().eval(), (torch.zeros(1, 6, dtype=torch.long),), name="tagger")


def test_run_names_the_inputs_the_model_refuses(program):
    ids = np.array([[1, 2, 3, 4, 5, 12]], np.int64)
    with pytest.raises(UserError) as caught:
        program.run(ids)
    text = str(caught.value)
    assert "index out of range" in text and "'ids'" in text and "values 1..12" in text and "vocabulary" in text


def test_a_build_calibrated_on_ids_past_the_vocabulary_stops_with_a_user_error(program, tmp_path):
    rng = np.random.default_rng(0)
    calibration = [[rng.integers(0, 20, (1, 6))] for _ in range(8)]
    with pytest.raises(UserError, match="index out of range"):
        tpuedge.build(program, "android", tmp_path / "out", quantize="int8", calibration=calibration)
    assert not (tmp_path / "out").exists()


def test_samples_the_model_takes_still_run(program):
    assert program.run(np.array([[1, 2, 3, 4, 5, 9]], np.int64))[0].shape == (1, 3)


def test_a_float_build_names_the_inputs_the_model_refuses_not_the_kernel(program, tmp_path):
    """A float build's reference runs beside its LiteRT verification (edge/android/verification_runs.py), after
    the conversion: the IR's own refusal still comes first, however LiteRT takes those ids."""
    rng = np.random.default_rng(0)
    samples = [[rng.integers(0, 20, (1, 6))] for _ in range(4)]
    with pytest.raises(UserError, match="index out of range") as caught:
        tpuedge.build(program, "android", tmp_path / "out", quantize="none", calibration=samples)
    assert "vocabulary" in str(caught.value)
    assert not (tmp_path / "out").exists()
