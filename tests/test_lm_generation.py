"""The generation loops every decoder runtime shares: chunked prefill, decode, sampling, the
cache's end, and the token metrics an LM build is judged by."""

from __future__ import annotations

import numpy as np
import pytest
import tiny_lms
import torch

from tpuedge.quantize.token_metrics import matching_prefix, token_agreement
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative import export_decoder
from tpuedge.shared_ir.generative.generation import Sampling, generate, plan_chunks, prefill, teacher_forced_logits


class _Recorder:
    """A StepRunner that remembers what it was asked to run; its logits favour token (pos + 1)."""

    def __init__(self, prefill_lengths=(4, 8), cache_length=20, vocab=32):
        self.prefill_lengths, self.cache_length, self.vocab = prefill_lengths, cache_length, vocab
        self.calls = []

    def initial_cache(self):
        return [np.full(self.cache_length, -1)]

    def run(self, entry, tokens, input_pos, cache):
        self.calls.append((entry, tokens[0].tolist(), input_pos.tolist()))
        written = cache[0].copy()
        start = min(int(input_pos[0]), self.cache_length - len(input_pos))  # dynamic_update_slice's clamp
        written[start : start + len(input_pos)] = tokens[0]
        logits = np.zeros((1, len(input_pos), self.vocab), np.float32)
        logits[0, np.arange(len(input_pos)), (input_pos + 1) % self.vocab] = 1.0
        return (logits if entry == "decode" else None), [written]


def test_chunks_take_the_largest_entry_then_the_smallest_that_covers_the_rest():
    assert plan_chunks(19, 0, (4, 8), 64) == [("prefill_8", 8, 8), ("prefill_8", 8, 8), ("prefill_4", 3, 4)]
    assert plan_chunks(5, 0, (4, 8), 64) == [("prefill_8", 5, 8)]
    # near the cache's end no prefill entry fits: the rest goes one decode step at a time
    assert plan_chunks(5, 13, (4, 8), 20) == [("prefill_4", 4, 4), ("decode", 1, 1)]


def test_prefill_writes_every_prompt_token_at_its_position_and_pads_after_it():
    runner = _Recorder()
    cache, used = prefill(runner, list(range(10, 21)), runner.initial_cache())
    assert used == [("prefill_8", 8), ("prefill_4", 3)]
    assert runner.calls[1] == ("prefill_4", [18, 19, 20, 0], [8, 9, 10, 11])  # padding after the prompt
    assert cache[0][:11].tolist() == list(range(10, 21))


def test_generate_decodes_from_the_prompts_last_token_and_stops_at_eos():
    runner = _Recorder()
    result = generate(runner, [5, 6, 7], 6, stop_ids=(5,))
    assert runner.calls[0][0] == "prefill_4" and runner.calls[1] == ("decode", [7], [2])
    assert result.new_ids == [3, 4, 5] and result.stopped_by == "eos"


def test_what_does_not_fit_the_cache_is_refused_before_anything_runs():
    runner = _Recorder(cache_length=20)
    with pytest.raises(UserError, match=r"need 23 cache positions.*--cache-length 20.*at most 17"):
        generate(runner, [1, 2, 3], 20)
    with pytest.raises(UserError, match="prompt is empty"):
        generate(runner, [], 4)
    assert runner.calls == []


def test_sampling_is_seeded_and_top1_is_greedy():
    logits = np.random.default_rng(0).standard_normal(50)
    choose = Sampling(temperature=1.0, top_k=5, seed=3).chooser()
    first = [choose(logits) for _ in range(20)]
    again = Sampling(temperature=1.0, top_k=5, seed=3).chooser()
    assert [again(logits) for _ in range(20)] == first
    assert set(first) <= set(np.argsort(logits)[-5:].tolist()) and len(set(first)) > 1
    assert Sampling(temperature=1.0, top_k=1).chooser()(logits) == int(np.argmax(logits))
    with pytest.raises(UserError):
        Sampling(temperature=-1.0)


def test_a_prompt_longer_than_every_prefill_entry_gives_transformers_greedy_tokens():
    lm = tiny_lms.model("qwen2")
    bundle = export_decoder(lm, prefill_lengths=(4,), cache_length=48)
    ids = torch.randint(3, tiny_lms.VOCAB, (1, 15), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        wanted = lm.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)[0, 15:].tolist()
    result = generate(bundle.reference(), ids[0].tolist(), 6)
    assert [entry for entry, _ in result.chunks] == ["prefill_4"] * 4
    assert result.new_ids == wanted
    # teacher forcing from a prefilled context gives the same rows as from the start
    full = teacher_forced_logits(bundle.reference(), ids[0].tolist())
    tail = teacher_forced_logits(bundle.reference(), ids[0].tolist(), start=9)
    np.testing.assert_allclose(tail, full[8:], atol=1e-5)


def test_token_agreement_and_perplexity():
    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((40, 10)).astype(np.float32)]
    targets = [rng.integers(0, 10, 40)]
    same = token_agreement(reference, reference, targets)
    assert same.top1_agreement == 1.0 and same.perplexity_increase == pytest.approx(0.0)
    flipped = reference[0].copy()
    rows = np.arange(10)
    flipped[rows, np.argmax(flipped[rows], axis=1)] = -10.0  # the first 10 positions change their argmax
    worse = token_agreement(reference, [flipped], targets)
    assert worse.top1_agreement == pytest.approx(0.75)
    assert worse.by_position["0-15"] == pytest.approx(6 / 16)
    nll = -np.log(np.exp(reference[0]) / np.exp(reference[0]).sum(1, keepdims=True))[np.arange(40), targets[0]]
    assert same.perplexity == pytest.approx(float(np.exp(nll.mean())), rel=1e-6)
    assert matching_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2


def test_sampling_takes_any_top_k_and_a_tiny_temperature_and_refuses_a_negative_seed():
    logits = np.array([0.5, 3.0, 1.0, -2.0], np.float32)
    assert Sampling(temperature=0.7, top_k=50, seed=1).chooser()(logits) in range(4)  # top-k past the vocabulary: all
    assert Sampling(temperature=1e-308, seed=1).chooser()(logits) == 1  # overflowing temperature: greedy's token
    with pytest.raises(UserError, match="seed"):
        Sampling(temperature=1.0, seed=-1)
