"""Prefill, decode and sampling over any runtime that runs a decoder's entry points.

A runtime gives a `StepRunner`: `run(entry, tokens, input_pos, cache) -> (logits, cache)` with
numpy arrays (tokens int32 [1, T], input_pos int32 [T], logits float32 [1, T, vocab]; a prefill
entry gives no logits). The torch
reference (ProgramBundle.reference()), LiteRT, TFLite-Micro and XLA runners all go through the
loops here, so they prefill, chunk and sample alike:

- a prompt is prefilled in chunks: the largest prefill entry while the rest is longer, then the
  smallest that takes what is left, its padding positions after the prompt (their cache rows
  are written and then overwritten by the decode steps before anything reads them); where no
  prefill entry fits before the cache's end, the rest goes through decode one token at a time;
- the prompt's last token is not prefilled: the first decode step reads it and gives the first
  new token's logits (as LiteRT-LM does);
- nothing is written past the cache's end: a prompt plus new tokens longer than the cache is
  refused before anything runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.decoder import DECODE, prefill_entry

__all__ = [
    "StepRunner",
    "Sampling",
    "Generation",
    "generate",
    "prefill",
    "teacher_forced_logits",
    "plan_chunks",
    "check_room",
]


class StepRunner(Protocol):
    prefill_lengths: tuple[int, ...]
    cache_length: int

    def initial_cache(self) -> list: ...

    def run(self, entry: str, tokens: np.ndarray, input_pos: np.ndarray, cache: list) -> tuple[np.ndarray | None, list]:
        """(logits [1, T, vocab], or None for a prefill entry, which gives only caches; the new caches)"""


@dataclass(frozen=True)
class Sampling:
    """Greedy when temperature is 0; else softmax(logits / temperature) over the top_k tokens
    (0: all), drawn with a generator seeded by `seed`."""

    temperature: float = 0.0
    top_k: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0:
            raise UserError(f"temperature and top-k must be >= 0 (got {self.temperature}, {self.top_k}).")
        if self.seed < 0:
            raise UserError(f"the sampling seed is a non-negative integer (got {self.seed}).")

    def chooser(self):
        rng = np.random.default_rng(self.seed)

        def choose(logits: np.ndarray) -> int:
            if self.temperature == 0:
                return int(np.argmax(logits))
            with np.errstate(over="ignore"):  # a temperature so small it overflows: the limit is greedy
                scaled = logits.astype(np.float64) / self.temperature
            if not np.isfinite(scaled.max()):
                return int(np.argmax(logits))
            if 0 < self.top_k < len(scaled):
                cut = np.partition(scaled, -self.top_k)[-self.top_k]
                scaled = np.where(scaled >= cut, scaled, -np.inf)
            probs = np.exp(scaled - scaled.max())
            return int(rng.choice(len(probs), p=probs / probs.sum()))

        return choose


@dataclass
class Generation:
    prompt_ids: list[int]
    new_ids: list[int]
    time_to_first_token_s: float
    prefill_s: float
    decode_s: float
    stopped_by: str  # "eos" or "max_new_tokens"
    chunks: list[tuple[str, int]] = field(default_factory=list)

    @property
    def prefill_tokens_per_s(self) -> float:
        return (len(self.prompt_ids) - 1) / self.prefill_s if self.prefill_s > 0 and len(self.prompt_ids) > 1 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        steps = len(self.new_ids) - 1  # the first new token's step is the prompt's last token's
        return steps / self.decode_s if self.decode_s > 0 and steps > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "prompt_tokens": len(self.prompt_ids),
            "new_tokens": len(self.new_ids),
            "time_to_first_token_s": round(self.time_to_first_token_s, 4),
            "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 2),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2),
            "stopped_by": self.stopped_by,
        }


def plan_chunks(
    count: int, start: int, prefill_lengths: tuple[int, ...], cache_length: int
) -> list[tuple[str, int, int]]:
    """[(entry, tokens it takes, its length)] that prefill `count` tokens from position `start`."""
    plan, position, left = [], start, count
    lengths = sorted(prefill_lengths)
    while left > 0:
        fits = [n for n in lengths if position + n <= cache_length]
        full = [n for n in fits if n <= left]
        covering = [n for n in fits if n >= left]
        if left >= (fits[-1] if fits else 1) and full:
            length = full[-1]
        elif covering:
            length = covering[0]
        else:  # no prefill entry fits before the cache's end: one token a step
            plan.append((DECODE, 1, 1))
            position, left = position + 1, left - 1
            continue
        taken = min(length, left)
        plan.append((prefill_entry(length), taken, length))
        position, left = position + taken, left - taken
    return plan


def prefill(runner: StepRunner, ids: list[int], cache: list, start: int = 0) -> tuple[list, list[tuple[str, int]]]:
    """`cache` with `ids` written from position `start`; returns (cache, [(entry, tokens)])."""
    used = []
    position = start
    for entry, taken, length in plan_chunks(len(ids), start, runner.prefill_lengths, runner.cache_length):
        tokens = np.zeros((1, length), np.int32)
        tokens[0, :taken] = ids[position - start : position - start + taken]
        input_pos = np.arange(position, position + length, dtype=np.int32)
        _, cache = runner.run(entry, tokens, input_pos, cache)
        used.append((entry, taken))
        position += taken
    return cache, used


def check_room(prompt: int, new: int, cache_length: int) -> None:
    if prompt < 1:
        raise UserError("The prompt is empty: give at least one token (a non-empty --prompt).")
    if prompt + new > cache_length:
        raise UserError(
            f"The prompt's {prompt} tokens plus {new} new ones need {prompt + new} cache positions, but the model was "
            f"built with --cache-length {cache_length}; give fewer --max-new-tokens (at most {max(0, cache_length - prompt)}), "
            "a shorter prompt, or rebuild with a longer --cache-length."
        )


def generate(
    runner: StepRunner,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    sampling: Sampling = Sampling(),
    stop_ids: tuple[int, ...] = (),
) -> Generation:
    """New tokens after `prompt_ids`, up to `max_new_tokens` or a token of `stop_ids` (kept)."""
    prompt_ids = [int(i) for i in prompt_ids]
    check_room(len(prompt_ids), max_new_tokens, runner.cache_length)
    choose = sampling.chooser()
    begin = time.perf_counter()
    cache, chunks = prefill(runner, prompt_ids[:-1], runner.initial_cache())
    prefilled = time.perf_counter()
    new: list[int] = []
    token, position, first = prompt_ids[-1], len(prompt_ids) - 1, None
    stopped = "max_new_tokens"
    while len(new) < max_new_tokens:
        logits, cache = runner.run(DECODE, np.array([[token]], np.int32), np.array([position], np.int32), cache)
        token = choose(logits[0, -1])
        new.append(token)
        first = first or time.perf_counter()
        position += 1
        if token in stop_ids:
            stopped = "eos"
            break
    end = time.perf_counter()
    return Generation(prompt_ids, new, (first or end) - begin, prefilled - begin, end - (first or end), stopped, chunks)


def teacher_forced_logits(runner: StepRunner, ids: list[int], *, start: int = 1) -> np.ndarray:
    """The logits each position of `ids` gives for the next token, fed the true tokens:
    [len(ids) - start, vocab] float32 for the tokens ids[start:]. The first `start - 1` tokens
    are prefilled (context only); each later one is a decode step."""
    ids = [int(i) for i in ids]
    check_room(len(ids), 0, runner.cache_length)
    cache, _ = prefill(runner, ids[: start - 1], runner.initial_cache())
    rows = []
    for position in range(start - 1, len(ids) - 1):
        logits, cache = runner.run(DECODE, np.array([[ids[position]]], np.int32), np.array([position], np.int32), cache)
        rows.append(np.asarray(logits[0, -1], np.float32))
    return np.stack(rows)
