"""The pytest side: `tpuedge.testing.assert_runtime_close` and the `tpuedge_runtime_close` fixture
(registered through the `pytest11` entry point), on a real dynamic-int8 LiteRT build of digits."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tpuedge
from tpuedge.testing import RuntimeMismatch, assert_runtime_close

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def android_dynamic(digits_program, tmp_path_factory):
    return tpuedge.build(digits_program, "android", tmp_path_factory.mktemp("p") / "android", quantize="dynamic-int8")


@pytest.fixture(scope="module")
def eval_data(digits_model):
    _, _, _, x_test, y_test = digits_model
    return {"image": x_test[:96], "label": y_test[:96]}


def test_assert_runtime_close_returns_the_numbers_when_close(android_dynamic, digits_program, eval_data):
    result = assert_runtime_close(
        android_dynamic, digits_program, eval_data, min_cosine=0.999, labels="label", max_drop=1.0
    )
    assert result.passed and result.layers is None  # layers are only worked out on failure
    out = result.outputs[0]
    assert out.cosine >= 0.999 and out.top1_agreement >= 0.98
    assert result.accuracy.runtime_accuracy >= 95.0


def test_failure_message_has_the_table_and_the_worst_layers(android_dynamic, digits_program, eval_data, tmp_path):
    with pytest.raises(RuntimeMismatch) as info:
        assert_runtime_close(android_dynamic, digits_program, eval_data, min_cosine=1.0, report_dir=tmp_path / "r")
    message = str(info.value)
    assert message.startswith("LiteRT (android) does not compute what the float IR of 'digits' computes:")
    assert "cosine of output:" in message and "< required 1" in message
    for column in ("max abs err", "mean abs err", "SNR dB", "top-1 agree"):
        assert column in message
    assert "worst layers in LiteRT (android)" in message
    assert "conv1 → bn1 → relu" in message and "conv2 → bn2 → relu" in message
    layers = info.value.result.layers
    assert layers is not None and len(layers.ranked()) >= 4
    assert (tmp_path / "r" / "report.md").is_file() and (tmp_path / "r" / "snr_per_layer.png").stat().st_size > 10_000


def test_fixture_from_the_entry_point_in_a_users_suite(pytester, android_dynamic, digits_program, eval_data, tmp_path):
    model = digits_program.save(tmp_path / "digits.pt2")
    data = tmp_path / "eval.npz"
    np.savez(data, **eval_data)
    pytester.makepyfile(
        test_user=textwrap.dedent(
            f"""
            ARTIFACT, MODEL, DATA = {str(android_dynamic.directory)!r}, {str(model)!r}, {str(data)!r}

            def test_close(tpuedge_runtime_close):
                result = tpuedge_runtime_close(ARTIFACT, MODEL, DATA, min_cosine=0.999, labels="label")
                assert result.outputs[0].cosine >= 0.999

            def test_impossible(tpuedge_runtime_close):
                tpuedge_runtime_close(ARTIFACT, MODEL, DATA, min_cosine=1.0)
            """
        )
    )
    run = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    run.assert_outcomes(passed=1, failed=1)
    text = run.stdout.str()
    assert "RuntimeMismatch" in text and "cosine of output" in text and "worst layers in LiteRT" in text
    assert "tpuedge-verify/report.md" in text and "snr_per_layer.png" in text


def test_plugin_import_stays_light():
    code = "import sys, tpuedge.testing.plugin; print(sorted(m for m in ('torch', 'numpy', 'jax', 'ai_edge_litert') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"
