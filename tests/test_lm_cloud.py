"""A decoder LM on cloud-tpu: prefill and decode lowered to JAX from the captured bundle, batches of
sequences at their own positions (continuous batching), a sharded serving mesh on 8 host
devices, and the cloud-tpu build (jax.export steps, token metrics on XLA, generate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_lms
from cli_runner import run_cli

import tpuedge
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative import export_decoder
from tpuedge.shared_ir.generative.generation import Sampling, generate, teacher_forced_logits

CAPTURE = ["--prefill-lengths", "4,8", "--cache-length", "48"]


def _prompts(count: int = 6, lengths=(3, 13, 7, 1, 20, 9)) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [[int(t) for t in rng.integers(3, tiny_lms.VOCAB, n)] for n in lengths[:count]]


@pytest.fixture(scope="module")
def llama():
    bundle = export_decoder(tiny_lms.model("llama"), prefill_lengths=(4, 8), cache_length=48)
    from tpuedge.cloud.generative.jax_decoder import JaxDecoder

    return bundle, JaxDecoder(bundle)


def test_decode_in_jax_gives_torchs_logits():
    """Sliding-window layers, a tied table and head_dim != hidden/heads (gemma3)."""
    from tpuedge.cloud.generative.jax_decoder import JaxDecoder

    bundle = export_decoder(tiny_lms.model("gemma3"), prefill_lengths=(4,), cache_length=32)
    ids = _prompts(1, (21,))[0]
    want = teacher_forced_logits(bundle.reference(), ids, start=6)
    got = teacher_forced_logits(JaxDecoder(bundle).step_runner(), ids, start=6)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_greedy_tokens_match_torch_and_the_cache_is_donated(llama):
    bundle, decoder = llama
    assert decoder.weight_bytes == 4 * bundle.parameter_count  # the tied embedding table and LM head once
    prompt = _prompts(1, (13,))[0]
    assert generate(decoder.step_runner(), prompt, 20).new_ids == generate(bundle.reference(), prompt, 20).new_ids
    cache = decoder.new_cache(2)
    _, _, new = decoder.decode(cache, np.array([[5], [6]]), np.array([[0], [0]]))
    assert cache[0].is_deleted() and not new[0].is_deleted()  # updated in place, no second copy


def test_a_batch_of_ragged_prompts_decodes_each_as_alone(llama):
    from tpuedge.shared_ir.generative.batch_engine import generate_batch

    bundle, decoder = llama
    prompts = _prompts()
    alone = [generate(bundle.reference(), p, 12).new_ids for p in prompts]
    assert generate_batch(decoder, prompts, 12, slots=4) == alone  # 6 prompts through 4 rows: rows reused


def test_sampled_rows_keep_their_own_seed_and_rows_join_and_leave(llama):
    from tpuedge.shared_ir.generative.batch_engine import BatchEngine, Request

    _, decoder = llama
    prompts = _prompts(3)
    sampling = Sampling(temperature=0.8, top_k=20, seed=7)
    alone = generate(decoder.step_runner(), prompts[0], 10, sampling=sampling).new_ids
    engine = BatchEngine(decoder, slots=2)
    sampled = Request(prompts[0], 10, sampling)
    short = Request(prompts[1], 3)
    assert engine.add(sampled) and engine.add(short) and not engine.add(Request(prompts[2], 4))
    for _ in range(3):
        engine.step()
    assert short.stopped_by == "max_new_tokens" and short.slot is not None and engine.rows[short.slot] is None
    late = Request(prompts[2], 4)
    assert engine.add(late)  # joins while the sampled row is mid-way
    cancelled = Request(prompts[1], 30)
    while not sampled.done:
        engine.step()
    assert sampled.new_ids == alone
    assert engine.add(cancelled)
    cancelled.cancel()
    engine.step()
    assert cancelled.stopped_by == "cancelled" and cancelled.new_ids == []


def test_a_request_too_long_for_the_cache_is_refused_before_it_takes_a_row(llama):
    from tpuedge.shared_ir.generative.batch_engine import BatchEngine, Request

    _, decoder = llama
    engine = BatchEngine(decoder, slots=1)
    with pytest.raises(UserError, match="--cache-length 48"):
        engine.add(Request(list(range(3, 43)), 20))
    assert engine.rows == [None]


def test_a_mesh_spec_names_its_axes():
    from tpuedge.cloud.generative.serving_mesh import parse_serving_mesh

    with pytest.raises(UserError, match="'data' and/or 'model'"):
        parse_serving_mesh("fsdp:2")
    with pytest.raises(UserError, match="needs 64 devices"):
        parse_serving_mesh("model:64")


def test_a_training_mesh_names_each_axis_once():
    """'data:1,data:1' is the user's error in one paragraph, not a Mesh with one axis name twice."""
    from tpuedge.cloud.mesh import parse_mesh

    with pytest.raises(UserError, match="'data' and/or 'fsdp', each once"):
        parse_mesh("data:1,data:1")


_SHARDED = """
import json, sys
import numpy as np
sys.path.insert(0, {fixtures!r})
import tiny_lms
from tpuedge.shared_ir.generative import export_decoder
from tpuedge.cloud.generative.jax_decoder import JaxDecoder
from tpuedge.shared_ir.generative.batch_engine import generate_batch
bundle = export_decoder(tiny_lms.model("qwen2"), prefill_lengths=(4, 8), cache_length=48)
prompts = {prompts!r}
out = {{}}
for mesh in (None, "model:8", "data:4,model:2"):
    decoder = JaxDecoder(bundle, mesh=mesh)
    out[str(mesh)] = generate_batch(decoder, prompts, 10, slots=4)
out["q_proj"] = str(next(v for k, v in decoder.params.items() if k.endswith("layers.0.self_attn.q_proj.weight")).sharding.spec)
out["cache"] = str(decoder.new_cache(4)[0].sharding.spec)
print(json.dumps(out))
"""


def test_tensor_parallel_and_data_parallel_meshes_give_one_devices_tokens():
    fixtures = str(Path(__file__).parent / "fixtures")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    code = _SHARDED.format(fixtures=fixtures, prompts=_prompts(4))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["model:8"] == out["None"] and out["data:4,model:2"] == out["None"]
    assert "model" in out["q_proj"] and "'data', 'model'" in out["cache"]


@pytest.fixture(scope="module")
def cloud_build(tmp_path_factory):
    folder = tiny_lms.write_folder(tmp_path_factory.mktemp("tiny-llama") / "tiny-llama")
    out = tmp_path_factory.mktemp("cloud") / "lm"
    code, stdout, err = run_cli(
        "build", str(folder), "--target", "cloud-tpu", "--batch", "4", *CAPTURE, "--out", str(out)
    )
    assert code == 0, err
    return folder, out, stdout


def test_cloud_build_writes_each_step_and_measures_it_on_xla(cloud_build):
    _, out, stdout = cloud_build
    manifest = json.loads((out / "manifest.json").read_text())
    steps = ["decode", "decode_row", "prefill_4", "prefill_8"]
    assert manifest["jax_export"]["steps"] == steps
    assert {f"{s}.jax_export" for s in steps} | {f"{s}.stablehlo.mlir" for s in steps} <= set(manifest["files"])
    assert "tpu" in manifest["jax_export"]["platforms"]
    assert manifest["sizes"]["weight_bytes"] == 4 * manifest["sizes"]["parameter_count"]  # tied table stored once
    held = manifest["accuracy"]["runtime_vs_float_ir"]
    assert held["top1_agreement"] == 1.0 and held["positions"] >= 256
    assert manifest["accuracy"]["greedy"]["all_identical"]
    assert "teacher-forced top-1 100.00%" in stdout
    plan = manifest["tpu_plan"]
    if plan["status"] == "compiled":  # libtpu installed: the decode step compiled for v5e:2x2 without a TPU
        report = json.loads((out / "tpu_plan.json").read_text())
        step = report["decode_step"]
        assert (
            step["batch"] == 4
            and step["hbm_per_device"]["total_bytes"]
            >= step["weight_bytes_per_device"] + step["cache_bytes_per_device"]
        )
        assert report["largest_batch"]["fits"] and report["largest_batch"]["batch"] > 4
        assert "largest batch that fits" in stdout


def test_cloud_build_generates_the_float_irs_tokens(cloud_build):
    folder, out, _ = cloud_build
    from tpuedge.shared_ir.model_spec import load_program

    bundle = load_program(str(folder), {"prefill_lengths": "4,8", "cache_length": 48})
    artifact = tpuedge.load(out)
    prompt = "the cat sat on the mat and"
    ids = artifact.encode_prompt(prompt)
    assert artifact.generate(prompt, 12, stop_at_eos=False).token_ids == generate(bundle.reference(), ids, 12).new_ids
    from tpuedge.shared_ir.generative.batch_engine import generate_batch

    prompts = _prompts(3)
    assert generate_batch(artifact.steps, prompts, 8) == [generate(bundle.reference(), p, 8).new_ids for p in prompts]
    code, stdout, err = run_cli("generate", str(out), "--prompt", prompt, "--max-new-tokens", "6")
    assert code == 0, err
    assert "tokens/s" in stdout
    code, stdout, err = run_cli("verify", str(out), "--model", str(folder), "--min-top1", "0.99")
    assert code == 0, err + stdout
    assert "100.00%" in stdout


def test_cloud_build_of_a_language_model_refuses_training_options(cloud_build):
    folder, out, _ = cloud_build
    code, _, err = run_cli(
        "build", str(folder), "--target", "cloud-tpu", "--train-step", *CAPTURE, "--out", str(out.parent / "x")
    )
    assert code == 2 and "--train-step does not apply to a language model" in err
    assert not (out.parent / "x").exists()
