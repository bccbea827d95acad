"""Shared by the IR-rewrite test files: a small stand-in built for mcu, held to its budget."""

from __future__ import annotations

import numpy as np

import tpuedge


def assert_builds_for_mcu_within_budget(program, shape: tuple[int, ...], passes: set[str], out) -> None:
    """Build `program` for mcu (nrf52840) on 40 normal samples of `shape`: `passes` rewrote it, and
    TFLite-Micro meets the budget (every output's mean per-sample cosine >= 0.99) on the held-out ones."""
    rng = np.random.default_rng(1)
    samples = [(rng.standard_normal(shape).astype(np.float32),) for _ in range(40)]
    art = tpuedge.build(program, "mcu", out, calibration=samples, board="nrf52840")
    assert passes <= {r["pass"] for r in art.manifest["rewrites"]}
    assert min(art.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"]) >= 0.99
