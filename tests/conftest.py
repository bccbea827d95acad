"""Shared fixtures: the reference models of examples/ and a digits CNN trained once per session."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# The suite runs XLA on the host CPU (TPU work is deviceless compiles through libtpu); without
# this, an installed libtpu probes for a TPU in every process that starts jax. Set before any
# test module imports jax; child processes inherit it.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Builds in the suite share a build cache of their own, never the user's ~/.cache/tpuedge.
os.environ.setdefault("TPUEDGE_CACHE_DIR", tempfile.mkdtemp(prefix="tpuedge-test-cache-"))

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
sys.path.insert(0, str(EXAMPLES / "digits"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def digits_model():
    """(trained DigitsCNN in eval mode, x_train, y_train, x_test, y_test); about 10 s once."""
    import model as digits  # examples/digits/model.py

    net = digits.train_digits_cnn()
    return (net, *digits.digits_split())


@pytest.fixture(scope="session")
def digits_program(digits_model):
    import torch

    import tpuedge

    return tpuedge.export(digits_model[0], (torch.zeros(1, 1, 8, 8),), name="digits")
