"""Helpers for users' own test suites: prove the device computes what the PyTorch model computes.

    from tpuedge.testing import assert_runtime_close

    def test_phone_build_matches(program, tmp_path):
        artifact = tpuedge.build(program, "android", tmp_path / "android", quantize="int8", calibration=cal)
        assert_runtime_close(artifact, program, "eval.npz", min_cosine=0.99, labels="label", max_drop=1.0)

A language model's build is checked on text, token by token:

    assert_lm_close("build/lm/android", "lm.py:build", min_top1=0.95, max_perplexity_increase=0.05)

On failure the AssertionError shows the per-output table (max/mean abs error, cosine, SNR,
top-1 agreement, accuracy) and the layers ranked by SNR drop. The pytest plugin
(`tpuedge.testing.plugin`, registered via the `pytest11` entry point) adds the
`tpuedge_runtime_close` fixture, which also writes the markdown + PNG report to tmp_path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["assert_runtime_close", "assert_lm_close", "RuntimeMismatch"]


class RuntimeMismatch(AssertionError):
    """The artifact's runtime doesn't meet the thresholds; `.result` holds every number."""

    def __init__(self, message: str, result: Any):
        super().__init__(message)
        self.result = result


def assert_runtime_close(
    artifact: Any,
    model: Any,
    data: Any,
    *,
    min_cosine: float | None = 0.99,
    min_top1: float | None = None,
    labels: Any = None,
    max_drop: float | None = None,
    per_layer: bool | str = "on_failure",
    layer_samples: int = 32,
    report_dir: str | Path | None = None,
):
    """Assert that `artifact` (folder or Artifact) computes what `model` (Program or MODEL spec) does.

    data: .npz path, dict of arrays keyed by input name, one array, or a list of input tuples.
    per_layer: True (always), False (never) or "on_failure": rank the layers by SNR drop and
    put the worst in the failure message. report_dir: also write report.md + the SNR plot there
    when the assertion fails. Returns the VerifyResult when every threshold holds.
    """
    from tpuedge.verify.compare import verify
    from tpuedge.verify.per_layer import layer_report
    from tpuedge.verify.report import render_text

    result = verify(
        artifact,
        model,
        data,
        labels=labels,
        min_cosine=min_cosine,
        min_top1=min_top1,
        max_drop=max_drop,
        per_layer=per_layer is True,
        layer_samples=layer_samples,
    )
    if result.passed:
        return result
    if per_layer == "on_failure" and result.layers is None:
        from tpuedge.verify.compare import open_artifact, open_program
        from tpuedge.verify.data import load_data

        program = open_program(model)
        result.layers = layer_report(
            open_artifact(artifact), program, load_data(data, program.inputs, labels=labels), samples=layer_samples
        )
    lines = [f"{result.runtime} does not compute what the float IR of {result.model!r} computes:"]
    lines += [f"  - {check.describe()}" for check in result.failures]
    lines += ["", render_text(result)]
    if report_dir is not None:
        from tpuedge.verify.report import PLOT_FILE, REPORT_FILE, write_report_dir

        out = write_report_dir(report_dir, [result])
        lines += ["", f"report: {out / REPORT_FILE}" + (f", plot: {out / PLOT_FILE}" if result.layers else "")]
    raise RuntimeMismatch("\n".join(lines), result)


def assert_lm_close(
    artifact: Any,
    model: Any,
    *,
    text: Any = None,
    min_top1: float | None = 0.90,
    max_perplexity_increase: float | None = None,
    positions: int | None = None,
):
    """Assert that a language model's `artifact` follows the float IR of `model` (MODEL spec or
    bundle) on `text` (a .txt; default: tpuedge's held-out corpus), teacher-forced: top-1
    agreement and perplexity increase (see `tpuedge verify`). Returns the LMVerifyResult."""
    from tpuedge.verify.lm_verify import DEFAULT_POSITIONS, verify_decoder

    result = verify_decoder(
        artifact,
        model,
        text=text,
        min_top1=min_top1,
        max_perplexity_increase=max_perplexity_increase,
        positions=positions or DEFAULT_POSITIONS,
    )
    if result.passed:
        return result
    lines = [f"{result.runtime} does not follow the float IR of {result.model!r}:"]
    lines += [f"  - {f}" for f in result.failures] + result.lines()
    raise RuntimeMismatch("\n".join(lines), result)
