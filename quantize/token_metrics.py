"""Token-level accuracy of a language model against its float IR: the numbers an LM build is
judged by (the budget), reported in its manifest and printed by `tpuedge verify`.

- top-1 agreement: teacher-forced (both models read the true text), the share of positions whose
  most likely next token is the float IR's;
- perplexity: exp of the mean negative log-likelihood of the true next tokens, for each model, and
  its relative increase;
- greedy match: how many tokens a greedy continuation keeps identical to the float IR's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TokenAgreement", "token_agreement", "matching_prefix", "log_softmax"]

_POSITION_BUCKETS = (0, 16, 64, 256, 1024)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return -log_softmax(logits)[np.arange(len(targets)), targets]


@dataclass(frozen=True)
class TokenAgreement:
    positions: int
    sequences: int
    top1_agreement: float
    reference_perplexity: float
    perplexity: float
    by_position: dict[str, float] = field(default_factory=dict)  # "0-15": agreement at those positions

    @property
    def perplexity_increase(self) -> float:
        """Relative: 0.05 is 5% above the float IR's perplexity."""
        return self.perplexity / self.reference_perplexity - 1.0

    def to_json(self) -> dict:
        return {
            "positions": self.positions,
            "sequences": self.sequences,
            "top1_agreement": round(self.top1_agreement, 6),
            "reference_perplexity": round(self.reference_perplexity, 4),
            "perplexity": round(self.perplexity, 4),
            "perplexity_increase": round(self.perplexity_increase, 6),
            "top1_agreement_by_position": {k: round(v, 6) for k, v in self.by_position.items()},
        }


def token_agreement(
    reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], targets: Sequence[np.ndarray]
) -> TokenAgreement:
    """Per sequence: reference and candidate logits [positions, vocab] and the true next tokens
    [positions], position i predicting token i + 1 of the sequence."""
    agree, ref_nll, cand_nll, positions = [], [], [], []
    for ref, cand, tgt in zip(reference, candidate, targets, strict=True):
        tgt = np.asarray(tgt, np.int64)
        agree.append(np.argmax(ref, axis=-1) == np.argmax(cand, axis=-1))
        ref_nll.append(_nll(ref, tgt))
        cand_nll.append(_nll(cand, tgt))
        positions.append(np.arange(len(tgt)))
    agree_all, position_all = np.concatenate(agree), np.concatenate(positions)
    by_position = {}
    for low, high in zip(_POSITION_BUCKETS, (*_POSITION_BUCKETS[1:], None)):
        chosen = (position_all >= low) & (position_all < high if high is not None else True)
        if chosen.any():
            by_position[f"{low}-{high - 1}" if high is not None else f"{low}+"] = float(agree_all[chosen].mean())
    return TokenAgreement(
        positions=int(agree_all.size),
        sequences=len(agree),
        top1_agreement=float(agree_all.mean()),
        reference_perplexity=float(np.exp(np.concatenate(ref_nll).mean())),
        perplexity=float(np.exp(np.concatenate(cand_nll).mean())),
        by_position=by_position,
    )


def matching_prefix(reference: Sequence[int], candidate: Sequence[int]) -> int:
    """How many leading tokens of two continuations are equal."""
    count = 0
    for a, b in zip(reference, candidate):
        if int(a) != int(b):
            break
        count += 1
    return count
