"""What every decoder artifact (android, mcu, cloud-tpu) offers on top of its runtime's
StepRunner: text in, text out, with the timings `tpuedge generate` prints.

    artifact = tpuedge.load("build/smollm2/android")
    result = artifact.generate("The capital of France is", max_new_tokens=16)
    result.text, result.generation.decode_tokens_per_s
"""

from __future__ import annotations

from functools import cached_property

import resource
from dataclasses import dataclass
from pathlib import Path

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.decoder import DecoderSpec
from tpuedge.shared_ir.generative.generation import Generation, Sampling, generate

__all__ = ["GeneratingArtifact", "GeneratedText", "peak_rss_bytes", "decoder_report_lines"]


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class GeneratedText:
    prompt: str | None
    text: str | None  # the new tokens decoded (None without a tokenizer)
    generation: Generation
    peak_rss_bytes: int

    @property
    def token_ids(self) -> list[int]:
        return self.generation.new_ids

    def to_json(self) -> dict:
        return {
            "text": self.text,
            "new_ids": self.token_ids,
            **self.generation.to_json(),
            "peak_rss_bytes": self.peak_rss_bytes,
        }


class GeneratingArtifact:
    """Mixin before `Artifact`: the decoder spec and tokenizer read from the build folder; the
    artifact defines `step_runner(num_threads)`."""

    def __init__(self, directory, manifest: dict):
        super().__init__(directory, manifest)
        self.decoder_spec = DecoderSpec.from_json(manifest["decoder"])

    @cached_property
    def tokenizer(self):
        from tpuedge.shared_ir.generative.tokenizer import Tokenizer

        return Tokenizer.read(self.directory)

    def step_runner(self, num_threads: int = 1):
        raise NotImplementedError

    def encode_prompt(self, prompt: str | list[int], *, chat: bool = False) -> list[int]:
        if not isinstance(prompt, str):
            ids = [int(i) for i in prompt]
            bad = [i for i in ids if not 0 <= i < self.decoder_spec.vocab_size]
            if bad:
                raise UserError(
                    f"token ids {bad[:5]} are outside the vocabulary (0..{self.decoder_spec.vocab_size - 1})."
                )
            return ids
        if self.tokenizer is None:
            raise UserError(
                "This artifact has no tokenizer (its model was captured without one), so it can't read text; "
                "give token ids instead (`--prompt-ids 1,2,3`, or a list in Python)."
            )
        return self.tokenizer.encode(self.tokenizer.chat_prompt(prompt) if chat else prompt)

    def generate(
        self,
        prompt: str | list[int],
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        seed: int = 0,
        chat: bool = False,
        num_threads: int = 1,
        stop_at_eos: bool = True,
    ) -> GeneratedText:
        ids = self.encode_prompt(prompt, chat=chat)
        stop = tuple(self.tokenizer.eos_token_ids) if self.tokenizer is not None and stop_at_eos else ()
        generation = generate(
            self.step_runner(num_threads),
            ids,
            int(max_new_tokens),
            sampling=Sampling(float(temperature), int(top_k), int(seed)),
            stop_ids=stop,
        )
        text = self.tokenizer.decode(generation.new_ids) if self.tokenizer is not None else None
        return GeneratedText(prompt if isinstance(prompt, str) else None, text, generation, peak_rss_bytes())


def decoder_report_lines(manifest: dict, directory: Path) -> list[str]:
    """The console summary of any target's decoder build."""
    spec = manifest["decoder"]
    recipe = manifest.get("recipe") or {}
    sizes = manifest.get("sizes") or {}
    lines = [
        f"{manifest['model_name']} -> {directory}  (target {manifest['target']}, decoder)",
        f"  bundle fingerprint {manifest['ir_fingerprint'][:16]}",
        f"  entry points: {', '.join(manifest.get('entries', []))}; cache {spec['cache_length']} positions, "
        f"{len(spec['cache_shapes']) // 2} layers, vocabulary {spec['vocab_size']}",
    ]
    if recipe:
        lines.append(
            f"  quantize {recipe.get('scheme')}" + (f" (auto: {recipe['auto']['rule']})" if recipe.get("auto") else "")
        )
        for row in (recipe.get("auto") or {}).get("tried", []):
            held = row.get("held_out") or {}
            search = row["search"]
            lines.append(
                f"    {row['scheme']:<32} search top-1 {100 * search['top1_agreement']:.2f}% ppl "
                f"{100 * search['perplexity_increase']:+.2f}%"
                + (f"; held-out top-1 {100 * held['top1_agreement']:.2f}%" if held else "")
            )
    if sizes and "tflite_bytes" not in sizes:  # cloud-tpu: float weights beside the exported steps
        lines.append(
            f"  weights {sizes['weight_bytes'] / 2**20:.2f} MiB ({sizes.get('parameter_count', 0):,} parameters)"
        )
    elif sizes:
        lines.append(
            f"  size {sizes['tflite_bytes'] / 2**20:.2f} MiB (float {sizes.get('float_tflite_bytes', 0) / 2**20:.2f} MiB; "
            f"{sizes.get('parameter_count', 0):,} parameters)"
        )
    accuracy = manifest.get("accuracy") or {}
    held = accuracy.get("runtime_vs_float_ir")
    if held:
        lines.append(
            f"  accuracy vs float IR ({held['positions']} positions, {accuracy.get('inputs')}): teacher-forced top-1 "
            f"{100 * held['top1_agreement']:.2f}%, perplexity {held['perplexity']:.3f} vs {held['reference_perplexity']:.3f} "
            f"({100 * held['perplexity_increase']:+.2f}%)"
        )
    greedy = accuracy.get("greedy")
    if greedy and greedy.get("matching"):
        counts = ", ".join(f"{m['matching']}/{m['tokens']}" for m in greedy["matching"])
        lines.append(f"  greedy continuations matching the float IR: {counts}")
    budget = manifest.get("accuracy_budget")
    if budget:
        lines.append(
            "  accuracy budget met"
            if budget["met"]
            else f"  BELOW ACCURACY BUDGET (written because --allow-below-budget): {'; '.join(budget['failures'])}"
        )
    return lines
