"""`--quantize auto`, android's default: every candidate scheme is built with the real
converter, run in LiteRT on samples calibration did not set, timed, and the smallest, then
fastest, that meets the accuracy budget is written. The pure rule is tested on its own first."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_runner import run_cli
from tpuedge.quantize.auto import AutoCandidate, candidate_schemes, choose_recipe


def _c(scheme, size, ms, met=True):
    return AutoCandidate(scheme, size, ms, met, [0.999 if met else 0.5], [None])


def test_rule_takes_the_smallest_that_meets_the_budget():
    assert (
        choose_recipe([_c("int8", 100, 1.0, met=False), _c("dynamic-int8", 120, 1.0), _c("none", 400, 1.0)]).scheme
        == "dynamic-int8"
    )
    assert choose_recipe([_c("int8", 100, 1.0, met=False), _c("none", 400, 0.1, met=False)]) is None


def test_rule_lets_latency_decide_only_between_near_equal_sizes_and_by_a_clear_margin():
    small, near_fast, big_fast = _c("dynamic-int8", 1000, 2.0), _c("int8", 1040, 1.0), _c("none", 4000, 0.1)
    assert choose_recipe([small, near_fast, big_fast]).scheme == "int8"  # 4% larger, 2x faster
    assert choose_recipe([small, _c("int8", 1040, 1.9), big_fast]).scheme == "dynamic-int8"  # within noise: smallest
    assert choose_recipe([small, _c("int8", 1100, 0.5)]).scheme == "dynamic-int8"  # 10% larger: size wins


def test_without_calibration_only_schemes_that_need_none_are_candidates():
    assert "int8" in candidate_schemes(True) and "int8" not in candidate_schemes(False)
    assert set(candidate_schemes(False)) == {"dynamic-int8", "fp16", "none"}


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    """A model per-tensor int8 breaks (test_accuracy_budget.py's planted-outlier MLP)."""
    from test_accuracy_budget import OUTLIER_MODEL, outlier_inputs

    work = tmp_path_factory.mktemp("auto")
    (work / "outlier.py").write_text(OUTLIER_MODEL)
    np.save(work / "cal.npy", outlier_inputs())
    return work


def _build(work, out, *extra):
    return run_cli(
        "build", f"{work / 'outlier.py'}:build", "--target", "android", "--out", str(out), "--no-cache", *extra
    )


def test_default_build_skips_the_int8_recipes_that_miss_and_writes_a_smaller_one_that_meets(outlier):
    """Before auto, the default (dynamic-int8) gave this model a mean cosine of ~0.4."""
    code, stdout, err = _build(outlier, outlier / "a", "--no-per-channel", "--calibration", str(outlier / "cal.npy"))
    assert code == 0, err
    manifest = json.loads((outlier / "a" / "manifest.json").read_text())
    auto = manifest["recipe"]["auto"]
    rows = {c["scheme"]: c for c in auto["candidates"]}
    assert list(rows) == ["int8", "dynamic-int8", "fp16", "none"]
    assert (
        not rows["int8"]["met_budget"] and rows["int8"]["sample_cosine_per_output"][0] < 0.99
    )  # measured, not assumed (0.97 with every op int16)
    chosen = rows[auto["chosen"]]
    assert chosen["met_budget"] and manifest["recipe"]["scheme"] == auto["chosen"]
    assert chosen["bytes"] == (outlier / "a" / "model.tflite").stat().st_size  # the row is the file written
    assert chosen["bytes"] < rows["none"]["bytes"]  # a quantized recipe, not the float fallback
    assert all(not c["met_budget"] for c in auto["candidates"] if c["bytes"] < chosen["bytes"])
    assert auto["inputs"] == "held out from calibration" and manifest["accuracy_budget"]["met"]
    assert manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"] == chosen["sample_cosine_per_output"]
    assert "--quantize auto chose" in stdout and "missed" in stdout  # the table, on the console


def test_no_calibration_means_no_static_int8_candidate(outlier):
    code, _, err = _build(outlier, outlier / "b")
    assert code == 0, err
    auto = json.loads((outlier / "b" / "manifest.json").read_text())["recipe"]["auto"]
    assert [c["scheme"] for c in auto["candidates"]] == ["dynamic-int8", "fp16", "none"]
    assert auto["inputs"].startswith("random inputs")  # a smoke check, and named so


def test_when_no_candidate_meets_the_budget_the_build_exits_1_with_the_table(outlier):
    out = outlier / "c"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"previous")
    code, _, err = _build(outlier, out, "--calibration", str(outlier / "cal.npy"), "--min-cosine", "1.0")
    assert code == 1
    assert "no recipe --quantize auto tried meets the accuracy budget" in err
    assert all(s in err for s in ("int8", "dynamic-int8", "fp16", "none", "latency ms"))
    assert [p.name for p in out.iterdir()] == ["model.tflite"] and (out / "model.tflite").read_bytes() == b"previous"


def test_int8_io_or_strict_int8_make_auto_try_static_int8_only(outlier):
    """Before: `--io-dtype int8` without `--quantize int8` was exit 2 ('the scheme is auto')."""
    import tpuedge
    from tpuedge.shared_ir.model_spec import load_program
    from tpuedge.shared_ir.errors import UserError

    program = load_program(f"{outlier / 'outlier.py'}:build")
    cal = np.load(outlier / "cal.npy")
    artifact = tpuedge.build(program, "android", outlier / "io8", io_dtype="int8", calibration=cal, min_cosine=0.0)
    auto = artifact.manifest["recipe"]["auto"]
    assert [c["scheme"] for c in auto["candidates"]] == ["int8"] and auto["chosen"] == "int8"
    assert [t["dtype"] for t in artifact.manifest["tflite_io"]["inputs"]] == ["int8"]
    with pytest.raises(UserError, match=r"--strict-int8 \(only static int8 gives it.*needs calibration data"):
        program.lower("android", strict_int8=True)
