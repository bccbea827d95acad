"""Activation ranges from histograms (quantize/range_estimation.py) and their use in the int8
search (quantize/precision_search.py): measured against min/max on the whole model, the best kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize.range_estimation import Histogram, estimate_range


def _histogram(values: np.ndarray) -> Histogram:
    h = Histogram(float(values.min()), float(values.max()))
    h.add(values)
    return h


def test_min_max_is_the_range_widened_to_hold_zero():
    h = _histogram(np.array([0.5, 2.0, 3.0], np.float32))
    assert estimate_range(h, "min-max") == (0.0, 3.0)


def test_one_outlier_in_a_million_no_longer_sets_the_step():
    values = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    values[0] = 40.0
    h = _histogram(values)
    mse_low, mse_high = estimate_range(h, "mse")
    p_low, p_high = estimate_range(h, "percentile")
    assert 3.0 < p_high < 4.5 and -4.5 < p_low < -3.0  # the 0.01% tails clipped
    # MSE weighs the outlier's own error (36^2) against a million rounding errors: it clips less
    assert p_high < mse_high < 40.0 and -4.7 <= mse_low < 0


@pytest.mark.parametrize("shape", ["two-sided", "positive", "negative", "outlier"])
def test_the_mse_range_is_the_pair_of_ends_with_the_least_error(shape):
    """`estimate_range(h, "mse")` scores each end on its own; the answer is still the pair
    that the error of the module docstring, evaluated on every (low, high) pair, ranks first."""
    from tpuedge.quantize.range_estimation import _FRACTIONS, LEVELS

    rng = np.random.default_rng(len(shape))
    values = rng.standard_normal(20_000) * 3
    values = {"positive": np.abs(values), "negative": -np.abs(values), "outlier": np.append(values, 300.0)}.get(
        shape, values
    )
    h = _histogram(values.astype(np.float32))
    centers, counts = h.centers(), h.counts.astype(np.float64)
    best, best_error = None, np.inf
    for low in h.low * _FRACTIONS if h.low < 0 else [0.0]:
        for high in h.high * _FRACTIONS if h.high > 0 else [0.0]:
            inside = (centers >= low) & (centers <= high)
            clipped = np.where(centers < low, low - centers, 0) ** 2 + np.where(centers > high, centers - high, 0) ** 2
            error = (counts * (clipped + inside * ((high - low) / (LEVELS - 1)) ** 2 / 12)).sum()
            if error < best_error * (1 - 1e-12):
                best, best_error = (float(low), float(high)), error
    assert estimate_range(h, "mse") == pytest.approx(best, rel=1e-9)


def test_exact_zeros_are_counted_apart_and_cost_nothing():
    """Half a ReLU's outputs are exact zeros, which any grid holding 0 represents exactly: they
    must not pull the MSE range in (as s^2/12 each would)."""
    rng = np.random.default_rng(1)
    positives = rng.uniform(0, 1, 2000).astype(np.float32)
    sparse = np.concatenate([positives, np.zeros(200_000, np.float32)])
    h = _histogram(sparse)
    assert h.zeros == 200_000 and h.counts.sum() == 2000
    assert estimate_range(h, "mse") == estimate_range(_histogram(positives), "mse")


def test_non_finite_values_are_ignored_and_a_bad_method_is_named():
    h = Histogram(-1.0, 1.0)
    h.add(np.array([np.inf, -np.inf, np.nan, 0.5], np.float32))
    assert h.counts.sum() == 1
    with pytest.raises(ValueError, match="unknown range method 'entropy'"):
        estimate_range(h, "entropy")


class HeavyTailed(torch.nn.Module):
    """Two convolutions over inputs with heavy tails (Student t, 1.5 degrees of freedom): every
    activation's min/max is set by a few extreme pixels."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.fc = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3), torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(h.mean(dim=(2, 3)))


@pytest.mark.slow
def test_the_int8_search_keeps_estimated_ranges_where_they_measure_better(tmp_path):
    """Old code: min/max ranges only (all-int8 cosine 0.923 here, MSE ranges 0.945)."""
    torch.manual_seed(0)
    program = tpuedge.export(HeavyTailed().eval(), (torch.zeros(1, 3, 32, 32),), name="heavy_tailed")
    x = np.random.default_rng(0).standard_t(1.5, (48, 1, 3, 32, 32)).astype(np.float32)
    artifact = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=[[v] for v in x])
    ranges = artifact.manifest["recipe"]["calibrated_ranges"]
    scores = ranges["all_int8_by_method"]
    assert set(scores) == {"min-max", "mse", "percentile"}
    assert ranges["method"] == max(scores, key=scores.get) != "min-max"
    assert scores[ranges["method"]] > scores["min-max"] + 0.01
    assert artifact.manifest["accuracy_budget"]["met"]
    candidates = artifact.manifest["recipe"]["search"]["candidates"]
    assert {c["recipe"] for c in candidates} >= {"all int8", "all int8 [mse ranges]", "all int8 [percentile ranges]"}


def test_a_histogram_far_narrower_than_its_values_takes_them_without_overflow():
    """A histogram whose range calibration made tiny (an output masked to near zero) given a later
    sample's large values: (value - low) / width overflowed float32, a RuntimeWarning from our own
    code (a masked transformer's int8 build, bench/layer_patterns.py transformer_padding_mask)."""
    import warnings

    histogram = Histogram(0.0, 1e-36)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        histogram.add(np.array([1e6, 5e-37, 0.0], np.float32))
    assert histogram.counts.sum() == 2 and histogram.counts[-1] == 1 and histogram.zeros == 1
