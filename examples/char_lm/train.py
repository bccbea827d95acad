"""Train the character-level LM of model.py on tpuedge's corpus and keep its weights.

    python examples/char_lm/train.py [--steps N]

Prints the loss as it goes, the time it took and a greedy continuation of a few prompts (the
float model in torch, from the weights as saved), and writes char_lm.safetensors beside this file, which
`model.build()` reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import time
from pathlib import Path

import torch


def _model_module():
    """model.py beside this file (by path: a `model` elsewhere on sys.path is another one)."""
    spec = importlib.util.spec_from_file_location("char_lm_model", Path(__file__).with_name("model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def greedy_text(model, prompt: str, count: int) -> str:
    """`count` characters after `prompt`, greedy, through the protocol's decode steps."""
    tok = model.tokenizer
    ids = tok.encode(prompt)
    cache = model.kv_cache(model.c.max_positions)
    out = []
    with torch.no_grad():
        for position in range(len(ids) + count - 1):
            token = ids[position] if position < len(ids) else out[-1]
            logits, *cache = model(
                torch.tensor([[token]], dtype=torch.int32), torch.tensor([position], dtype=torch.int32), *cache
            )
            if position >= len(ids) - 1:
                out.append(int(logits[0, -1].argmax()))
    return tok.decode(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="training steps (default: the config's)")
    args = parser.parse_args()
    m = _model_module()
    config = m.CharConfig() if args.steps is None else dataclasses.replace(m.CharConfig(), steps=args.steps)
    begin = time.perf_counter()
    model, loss = m.train(config, log=print)
    seconds = time.perf_counter() - begin
    m.save(model)
    model = m.build(config)  # as builds read it: the float16 weights
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{params:,} parameters, vocabulary {model.vocab_size}; final loss {loss:.3f} nats/char; "
        f"trained in {seconds:.1f} s (1 thread)"
    )
    for prompt in (
        "The sun rises in the",
        "Once upon a time, in a small village by the river,",
        "Dear Sam, thank you for",
    ):
        print(f"  {prompt!r} -> {greedy_text(model, prompt, 48)!r}")
    print(f"weights: {m.WEIGHTS} ({m.WEIGHTS.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
