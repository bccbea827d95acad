"""The decoder capture: one ProgramBundle of prefill and decode entry points, the KV cache as
explicit inputs and outputs, computing what transformers computes, for every family tested."""

from __future__ import annotations

import numpy as np
import pytest
import tiny_lms
import torch

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative import export_decoder
from tpuedge.shared_ir.generative.generation import generate, teacher_forced_logits


@pytest.fixture(scope="module")
def llama():
    lm = tiny_lms.model("llama")
    return lm, export_decoder(lm, prefill_lengths=(8, 16), cache_length=48, name="tiny")


@pytest.mark.parametrize("family", tiny_lms.FAMILIES)
def test_each_family_computes_what_transformers_does(family):
    """Teacher-forced logits of every position (decode steps over the explicit cache) against the
    model's own full forward, and greedy tokens against `generate`. Gemma 3's sliding-window layer
    (window 8) sees 24 tokens, so the window's mask is exercised."""
    lm = tiny_lms.model(family)
    bundle = export_decoder(lm, prefill_lengths=(8,), cache_length=32, name=family)
    ids = torch.randint(0, tiny_lms.VOCAB, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = lm(ids).logits[0, :-1].numpy()
        wanted = lm.generate(ids[:, :12], max_new_tokens=8, min_new_tokens=8, do_sample=False)[0, 12:].tolist()
    got = teacher_forced_logits(bundle.reference(), ids[0].tolist())
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    assert generate(bundle.reference(), ids[0, :12].tolist(), 8).new_ids == wanted


def test_entry_points_name_their_inputs_and_outputs_as_litert_lm_reads_them(llama):
    _, bundle = llama
    assert bundle.entry_names == ["prefill_8", "prefill_16", "decode"]
    caches = ["kv_cache_k_0", "kv_cache_v_0", "kv_cache_k_1", "kv_cache_v_1"]
    decode = bundle.entries["decode"]
    assert [s.name for s in decode.inputs] == ["tokens", "input_pos", *caches]
    assert [s.name for s in decode.outputs] == ["logits", *caches]
    assert decode.inputs[0].shape == (1, 1) and decode.inputs[0].dtype == "int32"
    assert decode.inputs[2].shape == (1, 2, 48, 16)
    prefill = bundle.entries["prefill_16"]
    assert prefill.inputs[0].shape == (1, 16) and prefill.inputs[1].shape == (16,)
    assert [s.name for s in prefill.outputs] == caches  # a prefill's logits are never read: not computed
    assert bundle.decoder.cache_shapes == ((1, 2, 48, 16),) * 4


def test_the_entry_points_share_one_set_of_weights(llama):
    lm, bundle = llama
    states = [p.exported_program.state_dict for p in bundle.entries.values()]
    for name, tensor in states[0].items():
        assert all(state[name] is tensor for state in states[1:])
    tied = {id(t) for t in states[0].values()}
    assert bundle.parameter_count == sum(p.numel() for p in lm.parameters())  # the tied table counted once
    assert len(tied) < len(states[0])


def test_the_fingerprint_is_stable_and_moves_with_a_weight():
    lm = tiny_lms.model("llama")
    first = export_decoder(lm, prefill_lengths=(8,), cache_length=32).fingerprint
    assert export_decoder(lm, prefill_lengths=(8,), cache_length=32).fingerprint == first
    assert export_decoder(lm, prefill_lengths=(4,), cache_length=32).fingerprint != first
    with torch.no_grad():
        lm.model.norm.weight[0] += 1
    assert export_decoder(lm, prefill_lengths=(8,), cache_length=32).fingerprint != first


class _CharDecoder(torch.nn.Module):
    """The protocol without transformers: one attention layer over an explicit cache."""

    vocab_size = 16

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 8)
        self.qkv = torch.nn.Linear(8, 24)
        self.head = torch.nn.Linear(8, 16)

    def kv_cache(self, cache_length):
        return [torch.zeros(1, 1, cache_length, 8), torch.zeros(1, 1, cache_length, 8)]

    def forward(self, tokens, input_pos, k_cache, v_cache):
        from tpuedge import cache_write

        q, k, v = self.qkv(self.embed(tokens)).split(8, dim=-1)
        k_cache = cache_write(k_cache, k[:, None], input_pos, 2)
        v_cache = cache_write(v_cache, v[:, None], input_pos, 2)
        scores = q[:, None] @ k_cache.transpose(2, 3)
        allowed = torch.arange(k_cache.shape[2])[None, :] <= input_pos[:, None]
        scores = scores.masked_fill(~allowed, -1e9)
        return self.head((scores.softmax(-1) @ v_cache)[:, 0]), k_cache, v_cache


def test_a_module_following_the_protocol_is_captured():
    module = _CharDecoder().eval()
    bundle = export_decoder(module, prefill_lengths=(4,), cache_length=16)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    got = teacher_forced_logits(bundle.reference(), ids)
    cache = module.kv_cache(16)
    with torch.no_grad():
        full = module(torch.tensor([ids]), torch.arange(len(ids)), *cache)[0][0, :-1].numpy()
    np.testing.assert_allclose(got, full, atol=1e-5)


def test_what_the_capture_refuses_is_named():
    with pytest.raises(UserError, match=r"kv_cache\(cache_length\).*vocab_size"):
        export_decoder(torch.nn.Linear(2, 2))
    lm = tiny_lms.model("llama")
    with pytest.raises(UserError, match="prefill length 64 is longer than the cache"):
        export_decoder(lm, prefill_lengths=(64,), cache_length=32)
    with pytest.raises(UserError, match="past the 512 positions"):
        export_decoder(lm, prefill_lengths=(8,), cache_length=1024)
    with pytest.raises(UserError, match="float32"):
        export_decoder(tiny_lms.model("llama").to(torch.bfloat16), prefill_lengths=(8,), cache_length=32)


def test_transformers_static_cache_wrapper_is_captured_with_the_explicit_cache():
    """transformers' own export wrapper (a mutable static cache, fed cache_position) ended
    `tpuedge check` in an AssertionError inside torch.export; its causal LM is captured instead."""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    from tpuedge.shared_ir.model_spec import decoder_of

    lm = tiny_lms.model("llama")
    lm.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", cache_config={"batch_size": 1, "max_cache_len": 32}
    )
    wrapper = TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=32)
    assert decoder_of(wrapper) is lm
    assert decoder_of((wrapper, (torch.zeros(1, 1, dtype=torch.long),))) is lm


def test_check_answers_for_every_target_and_the_cloud_lowering_computes_the_decode_step(llama):
    """`tpuedge check` of a captured decoder: no traceback on any target (transformers' own
    export wrapper ended in one on android and cloud-tpu); the cloud backend lowers the cache
    write to XLA's dynamic_update_slice and computes torch's numbers."""
    from tpuedge.cloud.interpreter import to_jax

    _, bundle = llama
    assert bundle.check("android") == [] and bundle.check("cloud-tpu") == []
    mcu = {p.subject for p in bundle.check("mcu")}
    assert {"aten.sin.default", "aten.cos.default"} <= mcu  # RoPE computed in the graph: named, with its line
    program = to_jax(bundle.entries["decode"])
    reference = bundle.reference()
    cache = reference.initial_cache()
    tokens, position = np.array([[5]], np.int32), np.array([3], np.int32)
    logits, new_cache = reference.run("decode", tokens, position, cache)
    _, outputs = program(program.params, program.buffers, tokens, position, *cache)
    np.testing.assert_allclose(np.asarray(outputs[0]), logits, atol=1e-5)
    np.testing.assert_allclose(np.asarray(outputs[1]), new_cache[0], atol=1e-6)
