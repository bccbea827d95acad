"""A decoder LM to mcu: the char LM of examples/char_lm builds its decode step fully int8 with the
KV cache in the TFLite-Micro arena, TFLite-Micro generates what LiteRT generates from the same
file, `tpuedge generate` and `verify` work on the build, and an LM over a board is refused
before any conversion, naming flash and RAM with the KV cache counted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tiny_lms
from cli_runner import run_cli

import tpuedge
from tpuedge.shared_ir.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "examples" / "char_lm" / "model.py") + ":build"
CACHE = 128
KV_CACHE_BYTES = 3 * 2 * 2 * CACHE * 24  # layers x (K, V) x KV heads x positions x head dim, one byte each


@pytest.fixture(scope="module")
def bundle():
    from tpuedge.shared_ir.model_spec import load_program

    return load_program(SPEC, {"cache_length": CACHE})


@pytest.fixture(scope="module")
def built(bundle, tmp_path_factory):
    out = tmp_path_factory.mktemp("char-lm") / "mcu"
    artifact = tpuedge.build(bundle, "mcu", out, board="nrf52840")
    return out, artifact


def test_the_char_lm_is_small_and_trained(bundle):
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("char_lm_model", ROOT / "examples" / "char_lm" / "model.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert bundle.parameter_count == 222_432 and bundle.decoder.vocab_size == 82
    assert example.WEIGHTS.stat().st_size < 500_000
    # trained: on the corpus it was trained on, ~1.07 nats a character (uniform would be ln 82 = 4.4)
    model = example.build()
    ids = torch.tensor([model.tokenizer.encode(example.corpus_text()[: 4 * 129])]).reshape(4, 129)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(
            model.sequence_logits(ids[:, :-1]).reshape(-1, 82), ids[:, 1:].reshape(-1)
        )
    assert float(loss) < 1.3
    assert (
        bundle.tokenizer is not None and bundle.tokenizer.decode(bundle.tokenizer.encode("Hi, sea!\n")) == "Hi, sea!\n"
    )


def test_the_decode_step_is_one_int8_subgraph_with_the_kv_cache_in_the_arena(built):
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.mcu.c_array import parse_c_array
    from tpuedge.edge.generative.tflm_steps import decode_step_io

    out, artifact = built
    m = artifact.manifest
    data = (out / "model.tflite").read_bytes()
    model = tflite_file.read_model(data)
    assert m["entries"] == ["decode"] and len(model.subgraphs) == 1 and len(model.signatureDefs) == 1
    assert not any(tflite_file.is_external(b) for b in model.buffers)  # TFLite-Micro reads every buffer inline
    assert parse_c_array((out / "model_data.cc").read_text()) == data and m["flash_bytes"] == len(data)
    graph = model.subgraphs[0]
    used = {int(i) for op in graph.operators for i in [*op.inputs, *op.outputs]} | {int(i) for i in graph.inputs}
    floats = [
        tflite_file.text(graph.tensors[i].name)
        for i in sorted(used - {-1})
        if tflite_file.dtype_name(graph.tensors[i].type) == "float32"
    ]
    assert floats == []  # every tensor an op reads or writes is integer, I/O included
    ops = {o["op"] for o in m["tflm_ops"]}
    assert "FULLY_CONNECTED" not in ops and {"CONV_2D", "DYNAMIC_UPDATE_SLICE", "BATCH_MATMUL"} <= ops
    resolver = (out / "op_resolver.h").read_text()
    assert "AddDynamicUpdateSlice" in resolver and f"kOpCount = {len(ops)}" in resolver
    io = decode_step_io(data, artifact.decoder_spec)  # caches int8, each output with its input's scale and zero point
    assert [t["dtype"] for t in io["inputs"]] == ["int32", "int32"] + ["int8"] * 6 and io["outputs"][0][
        "dtype"
    ] == "int8"
    # the KV cache is the step's inputs and outputs: inside the arena, which the board's RAM holds
    arena, board = m["arena"], m["board_check"]
    assert m["sizes"]["kv_cache_bytes"] == arena["kv_cache_bytes"] == KV_CACHE_BYTES
    assert (
        KV_CACHE_BYTES < arena["measured_bytes"] <= arena["recommended_bytes"] <= board["ram_budget_bytes"] == 196_608
    )
    assert m["flash_bytes"] <= board["flash_budget_bytes"] and board["fits"]
    assert m["estimate_before_conversion"]["arena_bytes_at_least"] <= arena["measured_bytes"]
    assert m["sizes"]["parameter_count"] < m["flash_bytes"] < 1.5 * m["sizes"]["parameter_count"]  # a byte a weight
    held = m["accuracy"]["runtime_vs_float_ir"]
    assert held["top1_agreement"] >= 0.95 and abs(held["perplexity_increase"]) < 0.02 and held["positions"] >= 256
    assert m["accuracy_budget"]["met"]


def test_tflm_greedy_equals_litert_greedy_token_for_token(built, bundle):
    from tpuedge.edge.generative.tflm_steps import LiteRTIntegerStepRunner
    from tpuedge.shared_ir.generative.generation import generate

    out, artifact = built
    runtimes = artifact.manifest["tflm_vs_litert"]
    greedy = runtimes["greedy"]
    assert greedy["prompts"] == 4 and greedy["all_identical"]
    assert [r["matching"] for r in greedy["matching"]] == [32, 32, 32, 32]
    # every step the build ran in TFLite-Micro also ran in LiteRT: the same next token at each
    assert runtimes["steps_fed_the_same_inputs"] >= 600 and runtimes["same_next_token"] == 1.0
    assert runtimes["max_logit_lsb"] <= 4
    # and again here, on the written file, with prompts the build did not use
    tflm, litert = artifact.step_runner(), LiteRTIntegerStepRunner(artifact.tflite, artifact.decoder_spec)
    for prompt in ("Dear Sam, thank you for", "The train left the station at noon, and"):
        ids = bundle.tokenizer.encode(prompt)
        assert generate(tflm, ids, 40).new_ids == generate(litert, ids, 40).new_ids


def test_fully_connected_as_conv_makes_tflm_compute_as_litert_does():
    """TFLite-Micro's int8 FULLY_CONNECTED rounds apart from LiteRT's; the same layer as a 1x1
    CONV_2D does not (the rewrite the mcu decode step gets)."""
    import torch
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.generative.fc_as_conv import fully_connected_as_conv
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.edge.mcu.tflm_model import ops_used
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner
    from tpuedge.quantize.config import QuantConfig

    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(96, 192), torch.nn.ReLU(), torch.nn.Linear(192, 64, bias=False)).eval()
    program = tpuedge.export(layer, (torch.randn(1, 1, 96),), name="two_layers")
    base = float_tflite(program, target="mcu")
    quantize = run_quantizer(base)
    recipe = quantizer_recipe(QuantConfig(scheme="int8", io_dtype="integer", strict_int8=True, float_islands=False))
    name = LiteRTRunner(base).inputs[0].name
    quantize.calibrate(
        recipe, [{name: np.random.default_rng(i).standard_normal((1, 1, 96)).astype(np.float32)} for i in range(32)]
    )
    fc = quantize(recipe)
    model = tflite_file.read_model(fc)
    assert fully_connected_as_conv(model) == 2
    conv = tflite_file.write_model(model)
    rng = np.random.default_rng(1)
    inputs = [rng.integers(-128, 128, (1, 1, 96)).astype(np.int8) for _ in range(400)]

    def differing(data: bytes) -> tuple[int, list]:
        litert = Interpreter(model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        litert.allocate_tensors()
        tflm = TflmRunner(data, 1 << 16)
        count, outputs = 0, []
        for x in inputs:
            litert.set_tensor(litert.get_input_details()[0]["index"], x)
            litert.invoke()
            theirs, ours = litert.get_tensor(litert.get_output_details()[0]["index"]), tflm.run_raw([x])[0]
            count += int((theirs != ours).sum())
            outputs.append(ours)
        return count, outputs

    before, fc_outputs = differing(fc)
    after, conv_outputs = differing(conv)
    assert before > 0 and after == 0
    assert {o.name for o in ops_used(fc)} >= {"FULLY_CONNECTED"} and "FULLY_CONNECTED" not in {
        o.name for o in ops_used(conv)
    }
    # TFLite-Micro computes the same layers: its outputs at most 1 LSB from the FULLY_CONNECTED model's
    assert max(int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(fc_outputs, conv_outputs)) <= 1


def test_generate_prints_the_mcu_builds_text(built, bundle):
    out, artifact = built
    prompt = "The sun rises in the"
    code, stdout, err = run_cli("generate", str(out), "--prompt", prompt, "-n", "24")
    assert code == 0, err
    expected = artifact.generate(prompt, 24).text
    assert len(expected) == 24 and stdout.startswith(prompt + expected)
    assert re.search(r"TFLite-Micro \(mcu\): 20 prompt tokens, 24 new", stdout) and "decode" in stdout
    assert sum(ch.isalpha() for ch in expected) >= 12  # words, not a run of spaces or punctuation


def test_verify_measures_the_mcu_build_against_the_float_ir(built, tmp_path):
    out, artifact = built
    report = tmp_path / "verify.json"
    code, stdout, err = run_cli("verify", str(out), "--model", SPEC, "--min-top1", "0.9", "--json", str(report))
    assert code == 0, err + stdout
    result = json.loads(report.read_text())["results"][0]
    assert result["passed"] and result["runtime"] == "TFLite-Micro (mcu)"
    assert (
        result["token_agreement"]["top1_agreement"]
        == artifact.manifest["accuracy"]["runtime_vs_float_ir"]["top1_agreement"]
    )


def test_an_lm_over_the_board_is_refused_before_any_conversion(bundle, tmp_path):
    out = tmp_path / "m0"
    with pytest.raises(UserError) as refused:
        tpuedge.build(bundle, "mcu", out, board="cortex-m0plus")
    said = str(refused.value)
    assert "(flash and RAM over)" in said and "at least 222,432 bytes of flash" in said
    assert "at least 37,888 bytes of RAM" in said and "the int8 KV cache alone is 36,864" in said
    assert "196,608 bytes of flash and 24,576 of RAM" in said and "Nothing was converted or written" in said
    assert "\n" not in said and not out.exists()


def test_a_bigger_kv_cache_is_refused_on_ram_by_the_cli(tmp_path):
    folder = tiny_lms.write_folder(tmp_path / "tiny-llama")
    out = tmp_path / "out"
    code, _, err = run_cli(
        "build", str(folder), "--target", "mcu", "--cache-length", "512", "--board", "cortex-m0plus", "--out", str(out)
    )
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert "(RAM over)" in err and "98,624 bytes of flash" in err and "the int8 KV cache alone is 65,536" in err


def test_the_measured_arena_is_held_to_the_board_with_the_kv_cache_named():
    from tpuedge.edge.mcu.boards import resolve_board
    from tpuedge.edge.generative.mcu_lm_budget import LMEstimate, check_measured_fit

    estimate = LMEstimate(222_432, 222_432, KV_CACHE_BYTES, 1024, "the cache")
    board = resolve_board(None, 1024, 60)  # the estimate fits its 46,080 bytes of RAM; the measured arena does not
    check_measured_fit("char_lm", board, 284_920, 46_080, estimate)
    with pytest.raises(
        UserError,
        match=r"\(RAM over\): its int8 decode step is 284,920 bytes of flash and its tensor arena, "
        r"measured in TFLite-Micro, 112,640 bytes of RAM, of which the KV cache is 36,864",
    ):
        check_measured_fit("char_lm", board, 284_920, 112_640, estimate)


def test_options_of_the_other_kind_of_model_are_refused(bundle, tmp_path):
    import torch

    single = tpuedge.export(torch.nn.Linear(4, 2).eval(), (torch.zeros(1, 4),), name="linear")
    with pytest.raises(UserError, match="--calibration does not apply to a language model"):
        tpuedge.build(bundle, "mcu", tmp_path / "a", calibration="data.npz", board="nrf52840")
    with pytest.raises(UserError, match="--max-perplexity-increase does not apply to a single-entry model"):
        tpuedge.build(single, "mcu", tmp_path / "b", max_perplexity_increase=0.1)


def test_a_runner_without_prefill_entries_prefills_through_decode():
    from tpuedge.shared_ir.generative.generation import plan_chunks

    assert plan_chunks(5, 3, (), 16) == [("decode", 1, 1)] * 5
    assert plan_chunks(0, 0, (), 16) == []
