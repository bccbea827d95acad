"""examples/lora_smollm2's task and loss (the fine-tuning itself runs SmolLM2 for minutes: README)."""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import tiny_lms
import torch
import torch.nn.functional as F

from tpuedge.shared_ir.generative.tokenizer import Tokenizer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lora_smollm2" / "finetune.py"


@lru_cache(maxsize=1)
def _example():
    spec = importlib.util.spec_from_file_location("lora_smollm2_finetune", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through its module
    spec.loader.exec_module(module)
    return module


def test_held_out_pairs_are_disjoint_and_sequences_fit():
    example = _example()
    train, held_out = example.split_task(32, seed=0)
    assert len(held_out) == 32 and len(train) + 32 == len(example.COLORS) * len(example.NUMBERS)
    assert not set(train) & set(held_out)
    assert example.split_task(32, seed=0) == (train, held_out)  # seeded
    tokenizer = Tokenizer(tiny_lms.tokenizer_json(), bos_token_id=1, eos_token_ids=(0,))
    ids, labels = example.training_arrays(tokenizer, train[:5] + held_out)
    assert ids.shape[1] <= example.MAX_TOKENS  # the tiny tokenizer's pieces are the longest here
    prompt, answer = example.encode_example(tokenizer, train[0])
    assert answer[-1] == tokenizer.eos_token_ids[0]
    assert list(ids[0, : len(prompt) + len(answer)]) == prompt + answer
    assert tokenizer.decode(labels[0][labels[0] >= 0][:-1]) == " " + train[0].answer  # the loss reads only the answer
    assert (labels[0, : len(prompt)] == -100).all() and (labels[0, len(prompt) + len(answer) :] == -100).all()
    assert example.is_exact(tokenizer, train[0], answer) and not example.is_exact(tokenizer, train[0], answer[:-1])


def test_answer_loss_is_cross_entropy_over_the_answer():
    example = _example()
    logits = torch.randn(2, 6, 11, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[-100, -100, 3, 4, 5, -100], [-100, 7, 8, -100, -100, -100]])
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1), ignore_index=-100)
    np.testing.assert_allclose(float(example.AnswerLoss()(logits, labels)), float(expected), rtol=1e-6)
