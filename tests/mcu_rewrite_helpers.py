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


def assert_mcu_follows_float(
    program, sample, seeds=(1,), calibration_seeds=range(10, 26), min_cosine: float = 0.98
) -> None:
    """Build `program` for mcu (its default board) on `sample(seed)` for each calibration seed,
    written even below its budget, and hold each output of the TFLite-Micro run on `sample(seed)`
    for each of `seeds` to `min_cosine` against the float IR. `sample(seed)` gives the inputs as
    exported; a 4-D one goes in NHWC where the artifact takes it so (mcu's default image layout)."""
    from tpuedge.quantize.metrics import cosine

    artifact = tpuedge.build(
        program, "mcu", None, calibration=[list(sample(s)) for s in calibration_seeds], allow_below_budget=True
    )
    for seed in seeds:
        inputs = list(sample(seed))
        fed = [
            x.transpose(0, 2, 3, 1) if x.ndim == 4 and list(x.shape) != list(spec.shape) else x
            for x, spec in zip(inputs, artifact.inputs)
        ]
        for ours, reference in zip(artifact.run(*fed), program.run(*inputs)):
            assert ours.shape == reference.shape  # outputs keep their layout
            assert cosine(ours, reference) > min_cosine
