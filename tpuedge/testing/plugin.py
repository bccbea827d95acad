"""pytest plugin registered through the `pytest11` entry point (kept import-light).

It loads in every pytest run, so it imports nothing of tpuedge until a test asks for it.

Fixture `tpuedge_runtime_close`: `tpuedge.testing.assert_runtime_close` whose failure also
writes report.md and snr_per_layer.png under the test's tmp_path (the message gives the path).
Fixture `tpuedge_lm_close`: `tpuedge.testing.assert_lm_close`, a language model's token agreement.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["tpuedge_runtime_close", "tpuedge_lm_close"]


@pytest.fixture
def tpuedge_runtime_close(tmp_path):
    """`check(artifact, model, data, min_cosine=..., ...)` -> VerifyResult, or a failure with the
    per-output table, the worst layers and the report folder's path."""

    def check(artifact: Any, model: Any, data: Any, **thresholds: Any):
        from tpuedge.testing import assert_runtime_close

        thresholds.setdefault("report_dir", tmp_path / "tpuedge-verify")
        return assert_runtime_close(artifact, model, data, **thresholds)

    return check


@pytest.fixture
def tpuedge_lm_close():
    """`check(artifact, model, text=None, min_top1=0.90, max_perplexity_increase=None)` -> LMVerifyResult,
    or a failure naming the agreement and perplexity it measured."""

    def check(artifact: Any, model: Any, **thresholds: Any):
        from tpuedge.testing import assert_lm_close

        return assert_lm_close(artifact, model, **thresholds)

    return check
