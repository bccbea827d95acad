"""The one metrics module (quantize/metrics.py): one set of names and definitions for build
reports, `tpuedge verify` and the benches."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from tpuedge.quantize.metrics import (
    compare_output,
    compare_outputs,
    stack_samples,
    task_accuracy,
    top1_agreement,
)

ROOT = Path(__file__).resolve().parents[1]


def test_build_summary_and_verify_give_the_same_numbers_for_the_same_samples():
    rng = np.random.default_rng(0)
    reference = [[rng.normal(size=(1, 10))] for _ in range(12)]  # what a batch-1 build collects
    candidate = [[r[0] + rng.normal(scale=0.3, size=(1, 10))] for r in reference]
    summary = compare_outputs(reference, candidate)
    verify = compare_output(
        "logits", stack_samples([r[0] for r in reference]), stack_samples([c[0] for c in candidate])
    )
    assert verify.shape == (12, 10)
    assert summary.cosine == verify.cosine and summary.centered_cosine == verify.centered_cosine
    assert summary.max_abs_error == verify.max_abs_error and summary.top1_agreement == verify.top1_agreement
    assert 0.0 < verify.top1_agreement < 1.0


def test_top1_only_for_samples_by_classes():
    hidden = np.random.default_rng(1).normal(size=(4, 6, 32))  # (samples, tokens, hidden): no classes
    assert top1_agreement(hidden, hidden) is None
    assert compare_outputs([[h[None]] for h in hidden], [[h[None]] for h in hidden]).top1_agreement is None
    assert top1_agreement(np.ones((4, 1)), np.ones((4, 1))) is None  # one score per sample
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert top1_agreement(logits, logits[:, ::-1]) == 0.0 and top1_agreement(logits, logits) == 1.0


def test_task_accuracy_and_the_worst_output_rule():
    scores = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.0, 1.0, 0.0]])
    assert task_accuracy(scores, np.array([1, 0, 0, 1])) == 0.75
    assert task_accuracy(scores[:, :1], np.array([0, 0, 0, 0])) is None
    # two outputs, the first exact, the second with its argmax flipped on sample 0: the summary
    # reports the worse output (what verify's per-output check would fail on), not a blend
    reference = [
        [np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, -1.0]])],
        [np.array([[3.0, 2.0, 1.0]]), np.array([[-1.0, 1.0]])],
    ]
    candidate = [[reference[0][0], np.array([[-1.0, 1.0]])], reference[1]]
    summary = compare_outputs(reference, candidate)
    second = compare_output("1", np.array([[1.0, -1.0], [-1.0, 1.0]]), np.array([[-1.0, 1.0], [-1.0, 1.0]]))
    assert summary.cosine == second.cosine == 0.0
    assert summary.top1_agreement == second.top1_agreement == 0.5
    assert summary.max_abs_error == 2.0


def test_there_is_one_metrics_module():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tpuedge.verify.metrics")
    definitions = re.compile(
        r"^def (cosine|centered_cosine|snr_db|compare_outputs?|top1_agreement|task_accuracy)\(", re.M
    )
    defined = sorted(
        str(p.relative_to(ROOT))
        for folder in ("shared_ir", "edge", "cloud", "quantize", "tpuedge", "bench")
        for p in (ROOT / folder).rglob("*.py")
        if definitions.search(p.read_text())
    )
    assert defined == ["quantize/metrics.py"]
    # and accuracy is computed by it, not by an argmax against labels written out again
    for path in ("edge/mcu/mcu_build.py", "tpuedge/verify/compare.py", "bench/edge_vs_peer.py"):
        text = (ROOT / path).read_text()
        assert "== labels" not in text and "== data.labels" not in text and "== y for" not in text, path
