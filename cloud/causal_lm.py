"""A transformers causal LM as the plain forward a train step captures, and its next-token loss:

step = train_step(CausalLMLogits(lm), NextTokenLoss(), optimizer, (ids, ids), lora=LoraConfig(...))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["CausalLMLogits", "NextTokenLoss"]


class CausalLMLogits(torch.nn.Module):
    """token ids -> logits, no KV cache (training reads every position at once)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


class NextTokenLoss(torch.nn.Module):
    """Cross-entropy of each position's logits against the next token."""

    def forward(self, logits, ids):
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
