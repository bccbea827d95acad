"""LiteRT latency of several models on one sample, measured alike (one way, for builds and benches).

    median_latency_ms({"int8": data, "fp16": other}, sample, budget_s=2.0) -> {"int8": 0.41, "fp16": 0.93}

One thread each (what a phone's background inference gets, and what these machines can measure
without the cores fighting). The runs are split into alternating blocks so that load drift on a
noisy machine hits every model alike; compare ratios from one call, never across calls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["median_latency_ms", "BLOCKS"]

BLOCKS = 5
_MAX_RUNS_PER_BLOCK = 20


def median_latency_ms(
    files: Mapping[str, bytes], sample: Sequence[np.ndarray], budget_s: float = 6.0
) -> dict[str, float]:
    """Median ms per invoke of each model on `sample`, spending about `budget_s` in all (at
    least BLOCKS runs per model, at most BLOCKS * 20)."""
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    sample = [np.asarray(a, np.int32) if np.asarray(a).dtype == np.int64 else a for a in sample]
    runners = {name: LiteRTRunner(data, num_threads=1) for name, data in files.items()}
    start = time.perf_counter()
    for runner in runners.values():  # warm-up: first invokes pay for allocation and packing
        runner.run(sample)
    each = max(1e-4, (time.perf_counter() - start) / max(1, len(runners)))
    per_block = max(1, min(_MAX_RUNS_PER_BLOCK, int(budget_s / each / max(1, len(runners)) / BLOCKS)))
    times: dict[str, list[float]] = {name: [] for name in files}
    for _ in range(BLOCKS):
        for name, runner in runners.items():
            for _ in range(per_block):
                t = time.perf_counter()
                runner.run(sample)
                times[name].append(time.perf_counter() - t)
    return {name: round(1000 * float(np.median(v)), 3) for name, v in times.items()}
