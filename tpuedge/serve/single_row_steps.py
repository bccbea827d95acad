"""A batch-1 StepRunner (LiteRT, TFLite-Micro) with the batched steps' interface, so the same
continuous-batching engine drives it with one row: one request at a time, its prefill chunks
and tokens exactly those of shared_ir/generative/generation.py's loop."""

from __future__ import annotations

import numpy as np

from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.generative.decoder import DECODE

__all__ = ["SingleRowSteps"]


class SingleRowSteps:
    """`new_cache(1)`, `prefill(cache, 0, entry, tokens, input_pos)` and `decode(cache, tokens,
    input_pos) -> (logits [1, vocab], greedy [1], cache)` over `runner`."""

    def __init__(self, runner, spec):
        self.runner = runner
        self.spec = spec

    def new_cache(self, batch: int) -> list:
        if batch != 1:
            raise InternalError(f"a batch-1 runtime holds one sequence, not {batch}")
        return self.runner.initial_cache()

    def prefill(self, cache: list, slot: int, entry: str, tokens, input_pos) -> list:
        # the engine's positions are [rows, T]; a StepRunner takes the one row's [T]
        _, cache = self.runner.run(entry, np.asarray(tokens, np.int32), np.asarray(input_pos, np.int32)[0], cache)
        return cache

    def decode(self, cache: list, tokens, input_pos):
        logits, cache = self.runner.run(DECODE, np.asarray(tokens, np.int32), np.asarray(input_pos, np.int32)[0], cache)
        last = np.asarray(logits)[:, -1]
        return last, np.argmax(last, axis=-1), cache
