"""A decoder LM to android: one .tflite with prefill and decode signatures sharing weights, LM
quantization under a token budget, text generated on LiteRT, verify and the LiteRT-LM bundle."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tiny_lms
from cli_runner import run_cli

import tpuedge
from tpuedge.shared_ir.errors import BudgetError
from tpuedge.shared_ir.generative.generation import generate

CAPTURE = ["--prefill-lengths", "8,16", "--cache-length", "64"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_lms.write_folder(tmp_path_factory.mktemp("tiny-llama") / "tiny-llama")


@pytest.fixture(scope="module")
def bundle(folder):
    from tpuedge.shared_ir.model_spec import load_program

    return load_program(str(folder), {"prefill_lengths": "8,16", "cache_length": 64})


@pytest.fixture(scope="module")
def float_build(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("float") / "android"
    code, stdout, err = run_cli(
        "build", str(folder), "--target", "android", "--quantize", "none", *CAPTURE, "--out", str(out)
    )
    assert code == 0, err
    return out, stdout


def test_float_build_stores_each_weight_once_and_follows_the_float_ir(float_build, bundle):
    out, stdout = float_build
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["entries"] == ["prefill_8", "prefill_16", "decode"]
    assert sorted(manifest["files"]) == ["model.tflite", "tokenizer.json", "tokenizer_meta.json"]
    from ai_edge_litert.interpreter import Interpreter

    signatures = Interpreter(model_path=str(out / "model.tflite")).get_signature_list()
    assert list(signatures) == ["prefill_8", "prefill_16", "decode"]
    assert "logits" in signatures["decode"]["outputs"] and "kv_cache_v_1" in signatures["prefill_8"]["outputs"]
    parameter_bytes = 4 * bundle.parameter_count  # float32, the tied embedding table once
    assert parameter_bytes <= (out / "model.tflite").stat().st_size <= 1.05 * parameter_bytes + 200_000
    accuracy = manifest["accuracy"]
    assert accuracy["runtime_vs_float_ir"]["top1_agreement"] == 1.0
    assert accuracy["runtime_vs_float_ir"]["positions"] >= 256
    assert "held out from the search" in accuracy["inputs"]
    assert accuracy["greedy"]["all_identical"] and accuracy["greedy"]["prompts"] == 3
    assert manifest["accuracy_budget"]["met"]
    assert "teacher-forced top-1 100.00%" in stdout


def test_generate_prints_the_float_irs_greedy_text_and_its_timings(float_build, bundle):
    out, _ = float_build
    code, stdout, err = run_cli("generate", str(out), "--prompt", "The capital of France is", "-n", "8")
    assert code == 0, err
    ids = bundle.tokenizer.encode("The capital of France is")
    wanted = bundle.tokenizer.decode(generate(bundle.reference(), ids, 8, stop_ids=(0,)).new_ids)
    assert stdout.startswith("The capital of France is" + wanted)
    assert "time to first token" in stdout and "decode" in stdout and "peak memory" in stdout
    artifact = tpuedge.load(out)
    assert artifact.generate(ids, 8, stop_at_eos=False).token_ids == generate(bundle.reference(), ids, 8).new_ids


def test_generate_refuses_what_the_cache_cannot_hold_and_models_that_are_not_lms(float_build, tmp_path):
    out, _ = float_build
    code, _, err = run_cli("generate", str(out), "--prompt", "The capital of France is", "-n", "60")
    assert code == 2 and "--cache-length 64" in err and "Traceback" not in err
    code, _, err = run_cli("generate", str(out), "--prompt-ids", "1,x")
    assert code == 2 and "--prompt-ids takes integers" in err


def test_verify_measures_token_agreement(float_build, folder, tmp_path):
    out, _ = float_build
    report = tmp_path / "verify.json"
    code, stdout, err = run_cli(
        "verify", str(out), "--model", str(folder), *CAPTURE[:0], "--min-top1", "0.99", "--json", str(report)
    )
    assert code == 0, err + stdout
    result = json.loads(report.read_text())["results"][0]
    assert result["token_agreement"]["top1_agreement"] == 1.0 and result["passed"]
    assert "agreement by position" in stdout


def test_dynamic_int8_is_a_quarter_of_the_float_file_and_measured_on_held_out_text(bundle, float_build, tmp_path):
    artifact = tpuedge.build(
        bundle, "android", tmp_path / "int8", quantize="dynamic-int8", min_top1=0.5, max_perplexity_increase=1.0
    )
    sizes = artifact.manifest["sizes"]
    assert sizes["weight_bytes"] <= 1.1 * bundle.parameter_count  # one byte a weight (and its scales), each once
    assert sizes["tflite_bytes"] < 0.5 * (float_build[0] / "model.tflite").stat().st_size
    held = artifact.manifest["accuracy"]["runtime_vs_float_ir"]
    assert 0.5 <= held["top1_agreement"] < 1.0
    assert artifact.manifest["recipe"]["lm_scheme"]["activations"] == "dynamic"
    assert len(artifact.generate("Once upon", 4, stop_at_eos=False).token_ids) == 4


def test_a_build_below_its_budget_writes_nothing(bundle, tmp_path):
    out = tmp_path / "int4"
    with pytest.raises(BudgetError, match=r"(?s)misses its accuracy budget.*int4-block32"):
        tpuedge.build(bundle, "android", out, quantize="int4-block32", min_top1=1.0)
    assert not out.exists()


def test_auto_keeps_the_smallest_candidate_meeting_the_budget(bundle, tmp_path):
    artifact = tpuedge.build(
        bundle, "android", tmp_path / "auto", quantize="auto", min_top1=0.9, max_perplexity_increase=0.2
    )
    recipe = artifact.manifest["recipe"]
    tried = recipe["auto"]["tried"]
    assert tried[-1]["scheme"].startswith(recipe["scheme"])
    assert all(row.get("held_out") is None or row is tried[-1] for row in tried[:-1] if "held_out" not in row)
    held = artifact.manifest["accuracy"]["runtime_vs_float_ir"]
    assert held["top1_agreement"] >= 0.9 and held["perplexity_increase"] <= 0.2


def test_litertlm_bundle_generates_the_same_greedy_text_in_the_litert_lm_runtime(folder, bundle, tmp_path):
    litert_lm = pytest.importorskip("litert_lm")
    out = tmp_path / "lm"
    code, _, err = run_cli(
        "build",
        str(folder),
        "--target",
        "android",
        "--quantize",
        "none",
        *CAPTURE,
        "--bundle",
        "litertlm",
        "--out",
        str(out),
    )
    assert code == 0, err
    assert (out / "model.litertlm").is_file()
    prompt = "The capital of France is"
    ours = tpuedge.load(out).generate(prompt, 12).text
    engine = litert_lm.Engine(str(out / "model.litertlm"), backend=litert_lm.Backend.CPU())
    session = engine.create_session(
        apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=12
    )
    session.run_prefill([prompt])
    theirs = "".join(session.run_decode().texts)
    assert theirs == ours and np.isfinite(len(theirs))
