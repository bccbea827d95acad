"""android's LM quantization choice and measurement: quantize/lm_search.py over LiteRT.

`choose_and_measure` builds each scheme from the float model (edge/generative/lm_quantizer.py),
runs it in the LiteRT interpreter and hands the numbers to the backend-neutral search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["choose_and_measure", "ChosenDecoder"]


@dataclass(frozen=True)
class ChosenDecoder:
    tflite: bytes
    recipe: dict
    accuracy: dict
    budget_entry: dict


def choose_and_measure(
    bundle,
    float_tflite: bytes,
    scheme: Any,
    budget,
    *,
    eval_file,
    eval_positions: int,
    search_positions: int,
    sequence_length: int,
    greedy_prompts: int,
    greedy_tokens: int,
) -> ChosenDecoder:
    from tpuedge.edge.generative.litert_steps import LiteRTStepRunner
    from tpuedge.edge.generative.lm_quantizer import DecoderQuantizer
    from tpuedge.quantize.lm_search import choose_lm_scheme, sensitive_parameters
    from tpuedge.quantize.lm_text import HELD_OUT, SEARCH, evaluation_text, prompt_ids
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    spec = bundle.decoder
    texts = {
        half: evaluation_text(
            bundle.tokenizer,
            half=half,
            sequence_length=sequence_length,
            vocab_size=spec.vocab_size,
            positions=eval_positions if half == HELD_OUT else search_positions,
            text_file=eval_file,
        )
        for half in (SEARCH, HELD_OUT)
    }
    quantizer = DecoderQuantizer(bundle, float_tflite)
    built: dict[str, bytes] = {}

    def build(candidate) -> bytes:
        with timed("quantization (LM scheme)"):
            built[candidate.name] = data = quantizer.quantize(candidate)
        return data

    def runner_of(data: bytes):
        return LiteRTStepRunner(data, spec)

    with (
        stage_progress(f"{bundle.name}: quantizing and measuring on LiteRT") as step,
        timed("token accuracy (LiteRT vs the float IR in torch)"),
    ):
        choice = choose_lm_scheme(
            name=bundle.name,
            target="android",
            reference=bundle.reference(),
            build=build,
            runner_of=runner_of,
            scheme=scheme,
            budget=budget,
            search_text=texts[SEARCH],
            eval_text=texts[HELD_OUT],
            prompts=prompt_ids(bundle.tokenizer, spec.vocab_size, greedy_prompts),
            greedy_tokens=greedy_tokens,
            sensitive=sensitive_parameters(bundle),
            on_candidate=step,
        )
    recipe = {
        "scheme": choice.scheme.name,
        "lm_scheme": choice.scheme.to_json(),
        **quantizer.recipe_notes(choice.scheme),
    }
    if scheme == "auto":
        recipe["auto"] = {
            "rule": "the smallest candidate meeting the budget on the search half, confirmed on the held-out half",
            "tried": choice.tried,
        }
    return ChosenDecoder(choice.candidate, recipe, choice.accuracy, choice.budget_entry)
