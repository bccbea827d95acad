"""The text an LM build measures accuracy on, and the split that keeps it honest.

tpuedge ships a small corpus written for it (quantize/data/lm_corpus.txt, 27 passages of
fiction, explanations, instructions, letters, dialogues, verse and arithmetic, Apache-2.0) and
a list of prompts. Passages alternate between two halves: the even ones are what a precision
search may read ("search"), the odd ones are held out for the accuracy the build reports and
its budget ("held_out"). A user's own text (`--eval FILE.txt`) is split the same way. A model
without a tokenizer is measured on random token sequences, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = ["EvalText", "evaluation_text", "shipped_prompts", "prompt_ids", "SEARCH", "HELD_OUT"]

_DATA = Path(__file__).parent / "data"
SEARCH, HELD_OUT = "search", "held_out"
_SEPARATOR = "\n---\n"


@dataclass(frozen=True)
class EvalText:
    sequences: list[list[int]]  # token ids, each at most the sequence length asked for
    source: str  # in words, for the report: which text, which half

    @property
    def positions(self) -> int:
        """Next-token predictions the sequences give (one fewer than their tokens)."""
        return sum(max(0, len(s) - 1) for s in self.sequences)


def _passages(path: Path | None) -> list[str]:
    text = (path or _DATA / "lm_corpus.txt").read_text(encoding="utf-8")
    parts = [p.strip() for p in text.replace("\r\n", "\n").split(_SEPARATOR)]
    return [p for p in parts if p]


def evaluation_text(
    tokenizer,
    *,
    half: str,
    sequence_length: int,
    positions: int,
    vocab_size: int,
    text_file: str | Path | None = None,
    seed: int = 0,
) -> EvalText:
    """Sequences of at most `sequence_length` tokens from `half` of the text, until they give at
    least `positions` predictions (fewer when the half runs out)."""
    if sequence_length < 2:
        raise UserError(f"sequences of {sequence_length} token(s) give no next-token prediction; use a longer cache.")
    if tokenizer is None:
        rng = np.random.default_rng(seed + (1 if half == HELD_OUT else 0))
        count = max(1, -(-positions // (sequence_length - 1)))
        sequences = [rng.integers(0, vocab_size, sequence_length).tolist() for _ in range(count)]
        return EvalText(
            sequences, f"random token ids ({half}; the model has no tokenizer: a smoke check, not accuracy)"
        )
    path = Path(text_file) if text_file is not None else None
    if path is not None and not path.is_file():
        raise UserError(
            f"--eval {path}: no such text file; give a UTF-8 .txt whose passages are separated by lines of ---."
        )
    passages = _passages(path)
    chosen = passages[0::2] if half == SEARCH else passages[1::2]
    if not chosen:
        raise UserError(
            f"{path or 'the corpus'} has too few passages to hold some out; separate passages by lines of ---."
        )
    sequences, total = [], 0
    for passage in chosen:
        ids = tokenizer.encode(passage)
        for start in range(0, len(ids) - 1, sequence_length):
            piece = ids[start : start + sequence_length]
            if len(piece) >= 2:
                sequences.append(piece)
                total += len(piece) - 1
            if total >= positions:
                break
        if total >= positions:
            break
    where = path.name if path is not None else "tpuedge's corpus"
    words = "held out from the search" if half == HELD_OUT else "the half the search reads"
    return EvalText(sequences, f"{where}: {len(sequences)} passage piece(s), {words}")


def shipped_prompts() -> list[str]:
    return [
        line.strip() for line in (_DATA / "lm_prompts.txt").read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def prompt_ids(tokenizer, vocab_size: int, count: int) -> list[list[int]]:
    """The first `count` shipped prompts, tokenized (random ids for a model without a tokenizer)."""
    if tokenizer is None:
        rng = np.random.default_rng(7)
        return [rng.integers(0, vocab_size, 6).tolist() for _ in range(count)]
    return [tokenizer.encode(p) for p in shipped_prompts()[:count]]
