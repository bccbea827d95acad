"""The LM benches' runtimes: the peer's files as a StepRunner, and prefill/decode speed of any.

The peer (litert-torch's `generative.export_hf`) writes `prefill_<n>` and `decode` signatures
that take an additive float `mask` [1, 1, T, cache] besides tokens, input_pos and the caches
(V stored transposed); its prefill gives no logits. `PeerStepRunner` fills the mask as the
peer's own code does (0 where s <= input_pos[t], -inf elsewhere), so tpuedge's loops
(shared_ir/generative/generation.py) run both files alike: same prompts, same teacher forcing,
same Python copies of the caches per step.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

__all__ = ["PeerStepRunner", "speed"]


class PeerStepRunner:
    def __init__(self, path: str, num_threads: int = 1):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=num_threads)
        names = list(self.interpreter.get_signature_list())
        self.signatures = {name: self.interpreter.get_signature_runner(name) for name in names}
        details = self.signatures["decode"].get_input_details()
        self.cache_names = sorted(
            (k for k in details if k.startswith("kv_cache_")), key=lambda k: (int(k.rsplit("_", 1)[1]), k)
        )
        self.shapes = {k: (tuple(details[k]["shape"]), details[k]["dtype"]) for k in self.cache_names}
        self.cache_length = int(details["mask"]["shape"][-1])
        self.prefill_lengths = tuple(sorted(int(n.split("_")[1]) for n in names if n.startswith("prefill_")))

    def initial_cache(self) -> list:
        return [np.zeros(*self.shapes[k]) for k in self.cache_names]

    def run(self, entry: str, tokens, input_pos, cache):
        allowed = np.arange(self.cache_length)[None, :] <= np.asarray(input_pos)[:, None]
        mask = np.where(allowed, 0.0, -np.inf).astype(np.float32)[None, None]
        out = self.signatures[entry](
            tokens=tokens, input_pos=input_pos, mask=mask, **dict(zip(self.cache_names, cache))
        )
        return out.get("logits"), [out[k] for k in self.cache_names]


def speed(runner, prompt_length: int, decode_steps: int, repeats: int = 3) -> dict:
    """tokens/s of one full prefill entry of `prompt_length` tokens, and of `decode_steps` decode
    steps after it (medians over `repeats`, after a warm-up that prepares the runtime's kernels)."""
    entry = f"prefill_{prompt_length}"
    tokens = np.arange(1, prompt_length + 1, dtype=np.int32)[None]
    positions = np.arange(prompt_length, dtype=np.int32)
    prefill_times, decode_times = [], []
    for repeat in range(repeats + 1):
        cache = runner.initial_cache()
        start = time.perf_counter()
        _, cache = runner.run(entry, tokens, positions, cache)
        prefilled = time.perf_counter()
        token = 5
        for step in range(decode_steps):
            logits, cache = runner.run(
                "decode", np.array([[token]], np.int32), np.array([prompt_length + step], np.int32), cache
            )
            token = int(np.argmax(logits.reshape(-1)))
        done = time.perf_counter()
        if repeat:  # the first round is the warm-up
            prefill_times.append(prefilled - start)
            decode_times.append(done - prefilled)
    return {
        "prefill_tokens_per_s": round(prompt_length / statistics.median(prefill_times), 2),
        "decode_tokens_per_s": round(decode_steps / statistics.median(decode_times), 2),
    }
