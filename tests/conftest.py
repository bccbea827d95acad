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


def libtpu_missing_reason() -> str | None:
    """Why a deviceless TPU compile can't run here (None: it can): the build's own check."""
    from tpuedge.cloud.tpu_compile import libtpu_unavailable_reason

    return libtpu_unavailable_reason()


def gpu_missing_reason() -> str | None:
    """Why the GPU tests can't run (None: they can). The suite's JAX_PLATFORMS defaults to cpu; a
    user's own value (e.g. JAX_PLATFORMS=cuda, as bench/device_check.sh sets) is kept."""
    import jax
    import torch

    if jax.default_backend() != "gpu":
        return f"JAX's default backend is {jax.default_backend()} (JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')!r}; set it to cuda)"
    if not torch.cuda.is_available():
        return "no CUDA torch build to compare with"
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needs_libtpu: compiles for a TPU without one; skipped, with the reason, when libtpu is missing"
    )
    config.addinivalue_line(
        "markers", "needs_gpu: runs on JAX's GPU backend; skipped, with the reason, when there is none"
    )


SLOW_TESTS = ROOT / "tests" / "slow_tests.txt"


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(config, items):
    """The tests listed in slow_tests.txt are marked slow. Tests marked needs_libtpu or needs_gpu
    skip with the reason instead of failing where libtpu (a base install without the `tpu` extra,
    or TPUEDGE_LIBTPU=off) or a GPU is missing."""
    listed = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    for marker, missing_reason in (("needs_libtpu", libtpu_missing_reason), ("needs_gpu", gpu_missing_reason)):
        marked = [item for item in items if item.get_closest_marker(marker)]
        reason = missing_reason() if marked else None
        for item in marked if reason else ():
            item.add_marker(pytest.mark.skip(reason=f"{marker.replace('_', ' ')}: {reason}"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A build cache of the test's own (the variables that would turn it off unset)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(folder))
    monkeypatch.delenv("TPUEDGE_NO_CACHE", raising=False)
    return folder


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
