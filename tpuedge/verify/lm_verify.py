"""`verify` for language models: an artifact's decode steps in its runtime against the float IR.

    result = verify_decoder("build/lm/android", "lm.py:build", text="eval.txt", min_top1=0.95)

Both run the same text teacher-forced (each position fed the true token): the share of positions
whose next-token argmax agrees, overall and by position; each one's perplexity on the text; and
for a few prompts, how many greedy tokens stay identical. The model is captured again with the
artifact's own prefill lengths and cache length, and must have its bundle fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["verify_decoder", "LMVerifyResult", "DEFAULT_POSITIONS"]

DEFAULT_POSITIONS = 256
_PROMPTS, _PROMPT_TOKENS = 3, 16


@dataclass
class LMVerifyResult:
    artifact: str
    runtime: str
    model: str
    text: str
    agreement: Any  # quantize.token_metrics.TokenAgreement
    greedy: dict
    min_top1: float | None
    max_perplexity_increase: float | None
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict:
        return {
            "artifact": self.artifact,
            "runtime": self.runtime,
            "model": self.model,
            "text": self.text,
            "token_agreement": self.agreement.to_json(),
            "greedy": self.greedy,
            "min_top1": self.min_top1,
            "max_perplexity_increase": self.max_perplexity_increase,
            "passed": self.passed,
            "failures": self.failures,
        }

    def lines(self) -> list[str]:
        a = self.agreement
        out = [
            f"{self.artifact} ({self.runtime}) vs the float IR of {self.model!r}, {a.positions} positions of {self.text}:",
            f"  teacher-forced top-1 agreement {100 * a.top1_agreement:.2f}%; perplexity {a.perplexity:.3f} vs "
            f"{a.reference_perplexity:.3f} ({100 * a.perplexity_increase:+.2f}%)",
            "  agreement by position: " + ", ".join(f"{k}: {100 * v:.1f}%" for k, v in a.by_position.items()),
        ]
        if self.greedy.get("matching"):
            out.append(
                "  greedy tokens matching the float IR: "
                + ", ".join(f"{m['matching']}/{m['tokens']}" for m in self.greedy["matching"])
            )
        return out


def _bundle_for(artifact, model: Any):
    from tpuedge.shared_ir.generative.bundle import ProgramBundle

    if isinstance(model, ProgramBundle):
        bundle = model
    elif isinstance(model, (str, Path)):
        from tpuedge.shared_ir.model_spec import load_program

        spec = artifact.decoder_spec
        bundle = load_program(str(model), {"prefill_lengths": spec.prefill_lengths, "cache_length": spec.cache_length})
        if not isinstance(bundle, ProgramBundle):
            raise UserError(f"{model} is not a decoder language model, and {artifact.directory} was built from one.")
    else:
        raise UserError(
            f"Can't verify a language model against a {type(model).__name__}; give its MODEL spec or its bundle."
        )
    if bundle.fingerprint != artifact.fingerprint:
        raise UserError(
            f"{artifact.directory} was built from another capture than {model!r} gives (bundle fingerprint "
            f"{artifact.fingerprint[:12]} vs {bundle.fingerprint[:12]}); its numbers would say nothing about this model. "
            "Rebuild it from this model, or verify it against the model it was built from."
        )
    return bundle


def verify_decoder(
    artifact: Any,
    model: Any,
    *,
    text: str | Path | None = None,
    min_top1: float | None = None,
    max_perplexity_increase: float | None = None,
    positions: int = DEFAULT_POSITIONS,
) -> LMVerifyResult:
    from tpuedge.quantize.lm_search import greedy_matches, teacher_forced
    from tpuedge.quantize.lm_text import HELD_OUT, evaluation_text, prompt_ids
    from tpuedge.quantize.token_metrics import token_agreement
    from tpuedge.verify.compare import open_artifact

    artifact = open_artifact(artifact)
    bundle = _bundle_for(artifact, model)
    spec = bundle.decoder
    eval_text = evaluation_text(
        bundle.tokenizer,
        half=HELD_OUT,
        sequence_length=min(128, spec.cache_length),
        positions=positions,
        vocab_size=spec.vocab_size,
        text_file=text,
    )
    reference, runner = bundle.reference(), artifact.step_runner()
    agreement = token_agreement(
        teacher_forced(reference, eval_text.sequences),
        teacher_forced(runner, eval_text.sequences),
        [seq[1:] for seq in eval_text.sequences],
    )
    greedy = greedy_matches(reference, runner, prompt_ids(bundle.tokenizer, spec.vocab_size, _PROMPTS), _PROMPT_TOKENS)
    result = LMVerifyResult(
        str(artifact.directory),
        artifact.runtime_name,
        bundle.name,
        eval_text.source,
        agreement,
        greedy,
        min_top1,
        max_perplexity_increase,
    )
    if min_top1 is not None and agreement.top1_agreement < min_top1:
        result.failures.append(f"top-1 agreement {100 * agreement.top1_agreement:.2f}% < {100 * min_top1:.1f}%")
    if max_perplexity_increase is not None and agreement.perplexity_increase > max_perplexity_increase:
        result.failures.append(
            f"perplexity {100 * agreement.perplexity_increase:+.2f}% above the float IR's "
            f"(max {100 * max_perplexity_increase:.1f}%)"
        )
    return result
