"""`LiteRTStepRunner`: a decoder's entry points run by the LiteRT interpreter, one signature each
(the StepRunner of shared_ir/generative/generation.py)."""

from __future__ import annotations

import numpy as np

from tpuedge.edge.tool_output import held_tool_output
from tpuedge.shared_ir.generative.decoder import INPUT_POS, LOGITS, TOKENS

__all__ = ["LiteRTStepRunner"]


class LiteRTStepRunner:
    def __init__(self, tflite: bytes, spec, *, num_threads: int = 1):
        from ai_edge_litert.interpreter import Interpreter

        self._tflite = tflite  # the interpreter reads the model from these bytes: kept alive with it
        self.spec = spec
        self.prefill_lengths = spec.prefill_lengths
        self.cache_length = spec.cache_length
        self.names = spec.cache_names
        with held_tool_output("LiteRT"):
            self.interpreter = Interpreter(model_content=tflite, num_threads=num_threads)
            self.signatures = {name: self.interpreter.get_signature_runner(name) for name in spec.entry_names}
        self._started: set[str] = set()

    def initial_cache(self) -> list[np.ndarray]:
        return [np.zeros(shape, self.spec.cache_dtype) for shape in self.spec.cache_shapes]

    def run(self, entry: str, tokens, input_pos, cache):
        feed = {TOKENS: tokens, INPUT_POS: input_pos, **dict(zip(self.names, cache))}
        if entry not in self._started:  # its first invoke prepares the delegate, which says so on stderr
            with held_tool_output("LiteRT"):
                out = self.signatures[entry](**feed)
            self._started.add(entry)
        else:
            out = self.signatures[entry](**feed)
        return out.get(LOGITS), [out[name] for name in self.names]
