"""TFLite-Micro against LiteRT on the same int8 decode step: what the mcu build reports and requires.

    lockstep = Lockstep(TflmStepRunner(...), LiteRTIntegerStepRunner(...))
    ... any generation loop over `lockstep` ...        # TFLite-Micro's numbers, LiteRT fed the same inputs
    report = runtimes_report(name, lockstep, prompts, tokens)

Every step the build runs in TFLite-Micro (the accuracy's text, the greedy continuations) also
runs in LiteRT's reference kernels on the same inputs: the report says at how many steps both
chose the same next token and how far apart their int8 logits came. Then each prompt is
continued greedily in each runtime on its own, and the build requires the same tokens, token for
token. The two runtimes' kernels agree bit for bit on a decode step once its FULLY_CONNECTED
layers are 1x1 convolutions (edge/generative/fc_as_conv.py), but for a broadcast MUL (an RMS
norm's x * rsqrt) that rounds 1 LSB apart on about 0.001% of its outputs (measured): logits can
still differ by a few LSB, and where a model's two best tokens are that close, two greedy
continuations would part. More than MAX_LOGIT_LSB apart means one of them does not compute the
file's model (a buffer read as zeros, a kernel that takes other types): an error of ours.
"""

from __future__ import annotations

import numpy as np

from tpuedge.shared_ir.errors import InternalError

__all__ = ["Lockstep", "runtimes_report", "MAX_LOGIT_LSB"]

MAX_LOGIT_LSB = 16


class Lockstep:
    """A StepRunner giving TFLite-Micro's results, with LiteRT run on the same inputs at each step."""

    prefill_lengths: tuple[int, ...] = ()

    def __init__(self, tflm, litert):
        self.tflm, self.litert = tflm, litert
        self.cache_length = tflm.cache_length
        self.steps = self.same_token = self.max_lsb = 0

    def initial_cache(self) -> list:
        return self.tflm.initial_cache()

    def run(self, entry: str, tokens, input_pos, cache):
        ours = self.tflm.raw_step(tokens, input_pos, cache)
        theirs = self.litert.raw_step(tokens, input_pos, cache)
        logits, other = ours[0].reshape(-1).astype(np.int32), theirs[0].reshape(-1).astype(np.int32)
        self.steps += 1
        self.same_token += int(np.argmax(logits) == np.argmax(other))
        self.max_lsb = max(self.max_lsb, int(np.abs(logits - other).max()))
        return self.tflm.outputs(entry, tokens, ours)

    def to_json(self) -> dict:
        return {
            "litert_kernels": "reference (BUILTIN_REF), of which TFLite-Micro's are ports",
            "steps_fed_the_same_inputs": self.steps,
            "same_next_token": round(self.same_token / max(self.steps, 1), 6),
            "max_logit_lsb": self.max_lsb,
            "max_logit_lsb_allowed": MAX_LOGIT_LSB,
        }


def runtimes_report(name: str, lockstep: Lockstep, prompts: list[list[int]], tokens: int) -> dict:
    """Greedy continuations of `prompts` in each runtime, compared token for token (TFLite-Micro's
    through `lockstep`, adding to its steps); InternalError when they differ, or when any step's
    logits were more than MAX_LOGIT_LSB apart."""
    from tpuedge.quantize.token_metrics import matching_prefix
    from tpuedge.shared_ir.generative.generation import generate

    rows = []
    for ids in prompts:
        count = min(tokens, lockstep.cache_length - len(ids))
        if count < 1:
            continue
        ours, theirs = generate(lockstep, ids, count).new_ids, generate(lockstep.litert, ids, count).new_ids
        rows.append({"prompt_tokens": len(ids), "tokens": count, "matching": matching_prefix(theirs, ours)})
    report = {
        **lockstep.to_json(),
        "greedy": {
            "prompts": len(rows),
            "tokens_each": tokens,
            "matching": rows,
            "all_identical": all(r["matching"] == r["tokens"] for r in rows),
        },
    }
    counts = ", ".join(f"{r['matching']}/{r['tokens']}" for r in rows)
    if lockstep.max_lsb > MAX_LOGIT_LSB or not report["greedy"]["all_identical"]:
        raise InternalError(
            f"{name}: TFLite-Micro and LiteRT do not generate alike from the same int8 decode step (greedy tokens "
            f"matching: {counts}; fed the same inputs, their int8 logits up to {lockstep.max_lsb} LSB apart, "
            f"{100 * report['same_next_token']:.2f}% of steps the same next token), so what the build measured is not "
            "what a device would run; nothing was written. Report it with the model."
        )
    return report
