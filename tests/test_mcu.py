"""End-to-end mcu target on the digits CNN: TFLM accuracy, arena, C array, op resolver, manifest."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import tpuedge
from tpuedge.edge.mcu.arena import ARENA_STEP, BISECTION_STEP, arena_fits, bisect_arena
from tpuedge.edge.mcu.c_array import parse_c_array
from tpuedge.edge.mcu.tflm_model import external_buffers, ops_used
from tpuedge.edge.mcu.tflm_ops import tflm_ops


@pytest.fixture(scope="module")
def digits_mcu(digits_program, digits_model, tmp_path_factory):
    """(lowered, artifact) of the digits CNN built for mcu once for this module."""
    import model as digits

    _, _, _, x_test, y_test = digits_model
    lowered = digits_program.lower("mcu", calibration=digits.calibration(), eval=(x_test, y_test))
    out = tmp_path_factory.mktemp("digits") / "mcu"
    return lowered, lowered.compile(out)


def test_tflm_accuracy_on_the_test_split(digits_mcu, digits_model):
    _, art = digits_mcu
    net, _, _, x_test, y_test = digits_model
    ev = art.manifest["verification"]["evaluation"]
    assert ev["samples"] == len(y_test)
    # --eval data given: accuracy is measured on it, and all 200 calibration samples calibrate
    assert ev["inputs"] == "eval data" and ev["calibration_samples_used"] == 200
    assert list(art.manifest["verification"]) == ["evaluation"]
    assert ev["tflm_accuracy"] >= 0.95
    assert ev["float_accuracy"] - ev["tflm_accuracy"] <= 0.015
    # Recompute independently through the artifact (TFLM, float in/out) and the torch module.
    import torch

    tflm_pred = np.array([art.run(x[None].transpose(0, 2, 3, 1))[0].argmax() for x in x_test])  # NHWC input
    with torch.no_grad():
        float_pred = net(torch.from_numpy(x_test)).argmax(1).numpy()
    assert abs((tflm_pred == y_test).mean() - ev["tflm_accuracy"]) < 1e-5
    assert (float_pred == y_test).mean() - (tflm_pred == y_test).mean() <= 0.015


def test_nhwc_input_by_default_and_no_transpose(digits_mcu):
    _, art = digits_mcu
    m = art.manifest
    assert m["layout"] == "NHWC" and m["inputs"][0]["shape"] == [1, 8, 8, 1]
    assert m["quantization"]["io"]["inputs"][0]["shape"] == [1, 8, 8, 1]
    assert "TRANSPOSE" not in {o["op"] for o in m["tflm_ops"]}
    assert "TRANSPOSE" not in {o.name for o in ops_used((art.directory / "model.tflite").read_bytes())}
    ev = m["verification"]["evaluation"]
    assert ev["tflm_accuracy"] >= ev["float_accuracy"] - 1 / ev["samples"]  # measured: 99.17% both


def test_full_int8_inline_and_runtimes_agree(digits_mcu):
    _, art = digits_mcu
    data = (art.directory / "model.tflite").read_bytes()
    m = art.manifest
    assert m["flash_bytes"] == len(data) == m["files"]["model.tflite"]["bytes"]
    assert external_buffers(data) == []
    io = m["quantization"]["io"]
    assert [t["dtype"] for t in io["inputs"] + io["outputs"]] == ["int8", "int8"]
    assert m["quantization"]["config"]["float_islands"] is False  # integer only; int16 allowed, not needed here
    assert m["quantization"]["recipe"]["non_int8_ops"] == []
    for v in m["verification"].values():
        assert v["tflm_vs_litert_max_lsb"] <= 1  # the README's claim for this model
        assert v["tflm_vs_float"]["top1_agreement"] >= 0.97


def test_arena_is_the_minimum_to_16_bytes_found_in_few_runs(digits_mcu, monkeypatch):
    """The arena is the smallest 16-byte multiple that runs (TFLM aligns to 16 bytes; the bisection
    stopped within 256 B of it). The allocator's own figure gives it in a few runs (a plain
    bisection took a dozen); without that figure the bisection reaches it to 256 B, as before."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    _, art = digits_mcu
    data = (art.directory / "model.tflite").read_bytes()
    sample = [np.zeros((1, 1, 8, 8), np.int8)]
    measured = art.arena_bytes
    assert 1024 < measured < 64 * 1024 and measured % ARENA_STEP == 0
    assert arena_fits(data, measured, sample)
    assert not arena_fits(data, measured - ARENA_STEP, sample)
    assert art.recommended_arena_bytes >= 1.1 * measured
    reads: list[int] = []
    read_model = tflite_file.read_model
    monkeypatch.setattr(tflite_file, "read_model", lambda *a, **k: reads.append(1) or read_model(*a, **k))
    tried: list[int] = []
    assert bisect_arena(data, sample, note=tried.append) == (measured, ARENA_STEP)
    assert len(reads) == 1  # the flatbuffer checked once, not at every size (0.66 s each on Resemblyzer)
    assert len(tried) <= 4, tried  # sizes up to the first that runs, the allocator's figure, 16 B below
    monkeypatch.setattr(TflmRunner, "allocated_bytes", lambda self: None)
    bisected: list[int] = []
    size, step = bisect_arena(data, sample, note=bisected.append)
    assert step == BISECTION_STEP and measured <= size < measured + BISECTION_STEP  # to the bisection's step
    assert len(bisected) > len(tried)


def test_the_activation_lower_bound_is_below_the_measured_arena(digits_mcu):
    """What the build refuses a model on before converting it never exceeds what TFLite-Micro measures."""
    from tpuedge.edge.mcu.boards import activation_lower_bound

    lowered, art = digits_mcu
    held, node = activation_lower_bound(lowered.program)
    assert node is not None and 0 < held <= art.arena_bytes


def test_model_data_cc_compiles_and_holds_the_model(digits_mcu, tmp_path):
    _, art = digits_mcu
    cc = (art.directory / "model_data.cc").read_text()
    h = (art.directory / "model_data.h").read_text()
    assert "alignas(16) const unsigned char g_digits_model_data[]" in cc
    assert "extern const unsigned int g_digits_model_data_len;" in h
    assert parse_c_array(cc) == (art.directory / "model.tflite").read_bytes()
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    shutil.copy(art.directory / "model_data.h", tmp_path)
    shutil.copy(art.directory / "model_data.cc", tmp_path)
    check = tmp_path / "check.cc"
    check.write_text(
        '#include "model_data.h"\n'
        'static_assert(alignof(decltype(g_digits_model_data[0])) >= 1, "");\n'
        "int main() { return (reinterpret_cast<unsigned long>(g_digits_model_data) % 16 == 0 && "
        "g_digits_model_data_len > 0) ? 0 : 1; }\n"
    )
    subprocess.run([gxx, "-std=c++17", "-c", "model_data.cc", "-o", "model_data.o"], cwd=tmp_path, check=True)
    subprocess.run([gxx, "-std=c++17", "check.cc", "model_data.o", "-o", "check"], cwd=tmp_path, check=True)
    assert subprocess.run([str(tmp_path / "check")]).returncode == 0  # linked, aligned, non-empty


def test_op_resolver_lists_exactly_the_models_ops(digits_mcu):
    _, art = digits_mcu
    text = (art.directory / "op_resolver.h").read_text()
    used = {o.name for o in ops_used((art.directory / "model.tflite").read_bytes())}
    import re

    adds = re.findall(r"resolver\.(Add\w+)\(\)", text)
    assert sorted(adds) == sorted(tflm_ops()[n]["resolver"] for n in used)
    assert len(adds) == len(set(adds)) == len(used)
    assert "MicroMutableOpResolver<kOpCount>" in text and f"kOpCount = {len(used)};" in text


def test_rebuild_is_byte_identical(digits_mcu, tmp_path):
    lowered, art = digits_mcu
    again = lowered.compile(tmp_path / "again")
    for name in ("model.tflite", "model_data.cc", "model_data.h", "op_resolver.h", "manifest.json"):
        assert (again.directory / name).read_bytes() == (art.directory / name).read_bytes(), name


def test_over_budget_exits_2_with_numbers_and_writes_nothing(digits_mcu, tmp_path):
    lowered, art = digits_mcu
    from tpuedge.edge.mcu.boards import budget_check, resolve_board

    board = resolve_board("cortex-m0plus", None, 4)  # 4 KB RAM: the arena can't fit
    with pytest.raises(tpuedge.UserError) as err:
        budget_check(board, art.manifest["flash_bytes"], art.recommended_arena_bytes)
    text = str(err.value)
    assert f"{art.recommended_arena_bytes:,}" in text and "3,072" in text and "Try:" in text
    # Through the whole build: same error, and the output folder never appears.
    import model as digits

    out = tmp_path / "tiny"
    small = art.manifest["flash_bytes"] // 1024  # flash budget below the model size
    with pytest.raises(tpuedge.UserError, match="flash"):
        tpuedge.build(
            lowered.program, "mcu", out, calibration=digits.calibration(64), flash_kb=small, ram_kb=256, eval="none"
        )
    assert not out.exists()


def test_evaluation_data_is_only_what_eval_names(digits_program, repo_root):
    """No regex over the calibration module's source: --eval (or nothing) decides."""
    spec = repo_root / "examples" / "digits" / "model.py"
    implicit = digits_program.lower("mcu", calibration=f"{spec}:calibration")
    assert implicit.evaluation is None and len(implicit.held_out) == 50 and len(implicit.calibration) == 150
    explicit = digits_program.lower("mcu", calibration=f"{spec}:calibration", eval=f"{spec}:evaluation")
    assert explicit.evaluation is not None and explicit.held_out == [] and len(explicit.calibration) == 200
