"""Continuous batching: sequences join a running batch, decode together and leave on their own.

`BatchEngine` holds one batched KV cache of `slots` rows over a decoder's steps: anything with
`spec`, `new_cache(batch)`, `prefill(cache, slot, entry, tokens, input_pos)` and
`decode(cache, tokens, input_pos) -> (logits [B, vocab], greedy [B], cache)` (cloud-tpu's
JaxDecoder and exported steps; android's one-row LiteRT steps in tpuedge/serve).

- `add(request)` prefills the request's prompt into a free row (the prompt's chunks planned as
  in shared_ir/generative/generation.py, its last token left for the first decode step), or
  returns False when every row is taken.
- `step()` runs one decode step for every row: each active row gets its next token, at its own
  position; a finished row (EOS, its token count, or cancelled) is freed for the next request.
  Free rows ride along (their writes land in a row nobody reads: a prefill writes a row from
  position 0 again, and attention reads no position after the one being decoded).
- Greedy rows take the device's argmax; sampled rows draw from their own seeded generator
  (shared_ir/generative/generation.py's `Sampling`), so a request gives the same tokens alone or
  beside others.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from tpuedge.shared_ir.generative.generation import Sampling, check_room, plan_chunks

__all__ = ["Request", "BatchEngine", "generate_batch"]

_ids = itertools.count()


@dataclass(eq=False)
class Request:
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    stop_ids: tuple[int, ...] = ()
    on_token: Callable[["Request", int], None] | None = None  # called from the engine's thread
    id: int = field(default_factory=lambda: next(_ids))
    new_ids: list[int] = field(default_factory=list)
    stopped_by: str | None = None  # "eos" | "max_new_tokens" | "cancelled"
    slot: int | None = None
    submitted_s: float = field(default_factory=time.perf_counter)
    first_token_s: float | None = None
    finished_s: float | None = None
    cancelled: bool = False

    def __post_init__(self) -> None:
        self.prompt_ids = [int(i) for i in self.prompt_ids]
        self._choose = self.sampling.chooser()
        self._position = len(self.prompt_ids) - 1  # where the next decode step writes
        self._token = self.prompt_ids[-1] if self.prompt_ids else 0

    @property
    def done(self) -> bool:
        return self.stopped_by is not None

    def cancel(self) -> None:
        """Stop at the next step (safe from another thread: the engine reads the flag)."""
        self.cancelled = True


class BatchEngine:
    def __init__(self, steps, slots: int = 8):
        self.steps = steps
        self.spec = steps.spec
        self.slots = int(slots)
        self.cache = steps.new_cache(self.slots)
        self.rows: list[Request | None] = [None] * self.slots

    @property
    def active(self) -> list[Request]:
        return [r for r in self.rows if r is not None]

    def check(self, request: Request) -> None:
        """UserError when the request can't fit the cache (before it takes a row)."""
        check_room(len(request.prompt_ids), request.max_new_tokens, self.spec.cache_length)

    def add(self, request: Request) -> bool:
        self.check(request)
        free = next((i for i, r in enumerate(self.rows) if r is None), None)
        if free is None:
            return False
        position = 0
        ids = request.prompt_ids[:-1]
        for entry, taken, length in plan_chunks(len(ids), 0, self.spec.prefill_lengths, self.spec.cache_length):
            tokens = np.zeros((1, length), np.int32)
            tokens[0, :taken] = ids[position : position + taken]
            input_pos = np.arange(position, position + length, dtype=np.int32)[None]
            self.cache = self.steps.prefill(self.cache, free, entry, tokens, input_pos)
            position += taken
        request.slot = free
        self.rows[free] = request
        if request.max_new_tokens == 0:
            self._finish(request, "max_new_tokens")
        return True

    def step(self) -> list[Request]:
        """One decode step for every active row; returns the requests that finished."""
        for request in self.active:
            if request.cancelled:
                self._finish(request, "cancelled")
        active = self.active
        if not active:
            return []
        tokens = np.zeros((self.slots, 1), np.int32)
        positions = np.zeros((self.slots, 1), np.int32)
        for request in active:
            tokens[request.slot, 0] = request._token
            positions[request.slot, 0] = request._position
        logits, greedy, self.cache = self.steps.decode(self.cache, tokens, positions)
        greedy = np.asarray(greedy)
        sampled = [r for r in active if r.sampling.temperature > 0]
        rows = np.asarray(logits) if sampled else None
        finished = []
        now = time.perf_counter()
        for request in active:
            token = (
                request._choose(rows[request.slot]) if request.sampling.temperature > 0 else int(greedy[request.slot])
            )
            request.new_ids.append(token)
            request.first_token_s = request.first_token_s or now
            request._token, request._position = token, request._position + 1
            if request.on_token is not None:
                request.on_token(request, token)
            if token in request.stop_ids:
                self._finish(request, "eos")
            elif len(request.new_ids) >= request.max_new_tokens:
                self._finish(request, "max_new_tokens")
            if request.done:
                finished.append(request)
        return finished

    def _finish(self, request: Request, why: str) -> None:
        request.stopped_by = why
        request.finished_s = time.perf_counter()
        if request.slot is not None and self.rows[request.slot] is request:
            self.rows[request.slot] = None

    def run(self, requests: Iterable[Request]) -> list[Request]:
        """Every request to its end, each joining as a row frees (first come, first served)."""
        queue = deque(requests)
        done = list(queue)
        for request in queue:
            self.check(request)
        while queue or self.active:
            while queue and self.add(queue[0]):
                queue.popleft()
            self.step()
        return done


def generate_batch(
    steps,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    slots: int | None = None,
    sampling: Sampling = Sampling(),
    stop_ids: tuple[int, ...] = (),
) -> list[list[int]]:
    """New tokens for each prompt, the prompts decoded together (ragged lengths welcome)."""
    engine = BatchEngine(steps, slots or len(prompts))
    requests = [Request(list(p), max_new_tokens, sampling, tuple(stop_ids)) for p in prompts]
    return [r.new_ids for r in engine.run(requests)]
