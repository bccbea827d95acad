"""Fine-tune SmolLM2-135M with LoRA on the cloud backend, deploy the merged weights to android int8.

    python examples/lora_smollm2/finetune.py [--steps 100] [--out build/lora_smollm2] [--model FOLDER]

1. The task: "Code for blue 17:" is answered " <<BLUE-17>>" and the end-of-text
   token: a format the model has never seen. 16 colours x 100 numbers give 1600 pairs; a seeded
   permutation holds out --eval of them (never trained on) and trains on the rest.
2. The base model answers the held-out prompts greedily in JAX (the decoder bundle lowered to
   the cloud backend): its exact-match accuracy.
3. `tpuedge.cloud.train_step(..., lora=LoraConfig(**LORA))`
   trains the adapters, batches of 8 sequences of at most 32 tokens, the loss on the answer
   tokens only, AdamW with a cosine schedule.
4. `step.merged_module()` (the adapters folded into the weights) is captured as a decoder
   bundle; it answers the held-out prompts greedily in JAX.
5. The same bundle builds for android int8 (--quantize, default dynamic-int8) under the LM
   accuracy budget, and answers them on LiteRT: exact match, and whether LiteRT's greedy tokens
   equal JAX's for every prompt.

Writes OUT/results.json, OUT/adapters.safetensors and the android build (OUT/android).
--model takes a transformers causal-LM folder with its tokenizer.json (default: SmolLM2-135M-
Instruct from bench/llm_models.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tpuedge.cloud.causal_lm import CausalLMLogits

HERE = Path(__file__).resolve().parent
COLORS = (
    "red",
    "blue",
    "green",
    "yellow",
    "purple",
    "orange",
    "pink",
    "brown",
    "black",
    "white",
    "gray",
    "silver",
    "gold",
    "navy",
    "teal",
    "olive",
)
NUMBERS = range(100)
MAX_TOKENS = 32  # per training sequence: prompt, answer, end-of-text and padding
MAX_NEW_TOKENS = 16  # greedy tokens per held-out prompt (an answer takes at most 10 with its end token)
PREFILL_LENGTHS = (16,)
CACHE_LENGTH = 64
LORA = {"rank": 8, "alpha": 16, "targets": ("q_proj", "v_proj")}


@dataclass(frozen=True)
class Example:
    color: str
    number: int

    @property
    def prompt(self) -> str:
        return f"Code for {self.color} {self.number}:"

    @property
    def answer(self) -> str:
        return f"<<{self.color.upper()}-{self.number}>>"


def split_task(eval_count: int, seed: int) -> tuple[list[Example], list[Example]]:
    """(training examples, held-out examples): every colour-number pair once, the held-out ones
    drawn by a seeded permutation, so the two sets are disjoint."""
    pairs = [Example(c, n) for c in COLORS for n in NUMBERS]
    order = np.random.default_rng(seed).permutation(len(pairs))
    held_out = [pairs[i] for i in order[:eval_count]]
    train = [pairs[i] for i in order[eval_count:]]
    return train, held_out


def encode_example(tokenizer, example: Example) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids with the end token): the prompt encoded alone, as at inference."""
    return tokenizer.encode(example.prompt), tokenizer.encode(" " + example.answer) + [tokenizer.eos_token_ids[0]]


def training_arrays(tokenizer, examples: list[Example]) -> tuple[np.ndarray, np.ndarray]:
    """ids and labels [N, L] (L: the longest sequence): each row the prompt, the answer and the
    end token, padded with the end token; labels are the ids on the answer and its end token,
    -100 elsewhere (the prompt and the padding carry no loss)."""
    rows = [encode_example(tokenizer, e) for e in examples]
    length = max(len(p) + len(a) for p, a in rows)
    if length > MAX_TOKENS:
        raise SystemExit(f"a training sequence has {length} tokens, more than {MAX_TOKENS}")
    pad = tokenizer.eos_token_ids[0]
    ids = np.full((len(rows), length), pad, np.int64)
    labels = np.full((len(rows), length), -100, np.int64)
    for i, (prompt, answer) in enumerate(rows):
        ids[i, : len(prompt) + len(answer)] = prompt + answer
        labels[i, len(prompt) : len(prompt) + len(answer)] = answer
    return ids, labels


class AnswerLoss(torch.nn.Module):
    """Next-token cross-entropy over the positions whose label is not -100 (the answer)."""

    def forward(self, logits, labels):
        logits, labels = logits[:, :-1], labels[:, 1:]
        mask = (labels >= 0).to(logits.dtype)
        logp = F.log_softmax(logits, dim=-1)
        picked = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return -(picked * mask).sum() / mask.sum()


def answer_of(tokenizer, new_ids: list[int]) -> str:
    return tokenizer.decode([i for i in new_ids if i not in tokenizer.eos_token_ids]).strip()


def is_exact(tokenizer, example: Example, new_ids: list[int]) -> bool:
    """The answer and then the end token, nothing else."""
    return bool(new_ids) and new_ids[-1] in tokenizer.eos_token_ids and answer_of(tokenizer, new_ids) == example.answer


def jax_answers(bundle, tokenizer, examples: list[Example]) -> list[list[int]]:
    """Greedy new tokens for each prompt, the decoder bundle lowered to JAX (the cloud backend)."""
    from tpuedge.cloud.generative.jax_decoder import JaxDecoder
    from tpuedge.shared_ir.generative.generation import generate

    runner = JaxDecoder(bundle).step_runner()
    stop = tuple(tokenizer.eos_token_ids)
    return [generate(runner, tokenizer.encode(e.prompt), MAX_NEW_TOKENS, stop_ids=stop).new_ids for e in examples]


def load_model(spec: str):
    """(the transformers causal LM in float32, eval mode; its folder; a name for the results)."""
    from transformers import AutoModelForCausalLM

    if spec == "smollm2":
        loaded = importlib.util.spec_from_file_location("llm_models", HERE.parents[1] / "bench" / "llm_models.py")
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        folder, name = module.smollm2_folder(), "SmolLM2-135M-Instruct"
    else:
        folder = Path(spec)
        name = folder.name
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), folder, name


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="smollm2", help="smollm2, or a transformers causal-LM folder with tokenizer.json"
    )
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--eval", type=int, default=32, help="held-out prompts")
    parser.add_argument(
        "--quantize", default="dynamic-int8", help="android LM scheme: dynamic-int8, weight-only-int8, auto, ..."
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("build/lora_smollm2"))
    args = parser.parse_args(argv)

    import tpuedge.cloud
    from tpuedge.cloud import LoraConfig
    from tpuedge.shared_ir.errors import BudgetError
    from tpuedge.shared_ir.generative import export_decoder
    from tpuedge.shared_ir.generative.tokenizer import Tokenizer

    begin = time.perf_counter()
    times: dict[str, float] = {}
    torch.manual_seed(args.seed)
    lm, folder, model_name = load_model(args.model)
    tokenizer = Tokenizer.from_hf_folder(folder, lm.generation_config)
    if tokenizer is None or not tokenizer.eos_token_ids:
        raise SystemExit(f"{args.model}: the folder needs a tokenizer.json and an end-of-text token")
    train, held_out = split_task(args.eval, args.seed)
    ids, labels = training_arrays(tokenizer, train + held_out)  # one length for both (training reads only train)
    ids, labels = ids[: len(train)], labels[: len(train)]
    print(
        f"{model_name}: {len(train)} training pairs, {len(held_out)} held out; sequences of {ids.shape[1]} tokens, "
        f"e.g. {held_out[0].prompt!r} -> {' ' + held_out[0].answer!r}"
    )
    args.out.mkdir(parents=True, exist_ok=True)

    def capture(model):
        return export_decoder(
            model, prefill_lengths=PREFILL_LENGTHS, cache_length=CACHE_LENGTH, name="lora_smollm2", tokenizer=tokenizer
        )

    # ---- the base model, greedy in JAX ----------------------------------------------------------
    mark = time.perf_counter()
    base_ids = jax_answers(capture(lm), tokenizer, held_out)
    times["base_capture_and_jax_eval_s"] = time.perf_counter() - mark
    base_exact = [is_exact(tokenizer, e, t) for e, t in zip(held_out, base_ids)]
    print(
        f"base model in JAX: exact match {sum(base_exact)}/{len(held_out)}; e.g. "
        f"{held_out[0].prompt!r} -> {tokenizer.decode(base_ids[0])!r}"
    )

    # ---- LoRA training on the cloud backend -----------------------------------------------------
    mark = time.perf_counter()
    model = CausalLMLogits(lm)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    first = torch.from_numpy(ids[: args.batch]), torch.from_numpy(labels[: args.batch])
    step = tpuedge.cloud.train_step(
        model, AnswerLoss(), optimizer, first, scheduler=schedule, seed=args.seed, lora=LoraConfig(**LORA)
    )
    times["train_capture_s"] = time.perf_counter() - mark
    order = np.random.default_rng(args.seed + 1)
    losses = []
    mark = time.perf_counter()
    for number in range(1, args.steps + 1):
        rows = order.choice(len(train), args.batch, replace=False)
        loss = step(torch.from_numpy(ids[rows]), torch.from_numpy(labels[rows]))
        if number == 1:
            loss.block_until_ready()
            times["first_step_s"] = time.perf_counter() - mark  # with its jit compile
        if number % 10 == 0 or number in (1, args.steps):
            losses.append((number, round(float(loss), 4)))
            print(f"  step {number:>4}: loss {float(loss):.4f} ({time.perf_counter() - mark:.0f} s)")
    float(loss)  # waits for the last step
    times["train_s"] = time.perf_counter() - mark
    step.save_adapters(args.out / "adapters.safetensors")

    # ---- the merged weights: greedy in JAX --------------------------------------------------------
    mark = time.perf_counter()
    merged = step.merged_module().lm.eval()
    del step
    bundle = capture(merged)
    tuned_ids = jax_answers(bundle, tokenizer, held_out)
    times["merged_capture_and_jax_eval_s"] = time.perf_counter() - mark
    tuned_exact = [is_exact(tokenizer, e, t) for e, t in zip(held_out, tuned_ids)]
    print(f"fine-tuned (merged) in JAX: exact match {sum(tuned_exact)}/{len(held_out)}")

    # ---- android int8 from the merged bundle, on LiteRT --------------------------------------------
    mark = time.perf_counter()
    android_dir = args.out / "android"
    budget_failure = None
    try:
        artifact = bundle.lower("android", quantize=args.quantize).compile(android_dir)
    except BudgetError as exc:  # written anyway, marked below budget, so the task can still be read on LiteRT
        budget_failure = str(exc)
        print(f"android {args.quantize}: {budget_failure}")
        artifact = bundle.lower("android", quantize=args.quantize, allow_below_budget=True).compile(android_dir)
    times["android_build_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    litert_ids = [artifact.generate(tokenizer.encode(e.prompt), MAX_NEW_TOKENS).token_ids for e in held_out]
    times["litert_eval_s"] = time.perf_counter() - mark
    litert_exact = [is_exact(tokenizer, e, t) for e, t in zip(held_out, litert_ids)]
    same = [a == b for a, b in zip(tuned_ids, litert_ids)]
    manifest = artifact.manifest
    print(
        f"android {manifest['recipe']['scheme']} on LiteRT: exact match {sum(litert_exact)}/{len(held_out)}; "
        f"greedy tokens identical to JAX on {sum(same)}/{len(held_out)} prompts"
    )
    times["total_s"] = time.perf_counter() - begin

    held = manifest["accuracy"]["runtime_vs_float_ir"]
    per_step = (times["train_s"] - times["first_step_s"]) / max(args.steps - 1, 1)
    results = {
        "model": model_name,
        "task": {
            "prompt": Example("blue", 17).prompt,
            "answer": " " + Example("blue", 17).answer,
            "train_pairs": len(train),
            "held_out_pairs": len(held_out),
            "sequence_tokens": int(ids.shape[1]),
        },
        "training": {
            "steps": args.steps,
            "batch": args.batch,
            "lr": args.lr,
            "schedule": "cosine to 0",
            "lora": {**LORA, "targets": list(LORA["targets"])},
            "losses": losses,
            "seconds_per_step_after_the_first": round(per_step, 3),
        },
        "exact_match": {
            "base_jax": sum(base_exact) / len(held_out),
            "finetuned_jax": sum(tuned_exact) / len(held_out),
            "android_litert": sum(litert_exact) / len(held_out),
        },
        "litert_tokens_equal_jax": {"prompts": sum(same), "of": len(held_out)},
        "android": {
            "scheme": manifest["recipe"]["scheme"],
            "tflite_bytes": manifest["sizes"]["tflite_bytes"],
            "budget_met": budget_failure is None,
            "budget_failure": budget_failure,
            "corpus_top1_agreement_vs_float_ir": held["top1_agreement"],
            "corpus_perplexity_increase": held["perplexity_increase"],
        },
        "seconds": {k: round(v, 1) for k, v in times.items()},
        "prompts": [
            {
                "prompt": e.prompt,
                "expected": e.answer,
                "base_jax": answer_of(tokenizer, b),
                "finetuned_jax": answer_of(tokenizer, t),
                "litert": answer_of(tokenizer, r),
                "tokens_equal": s,
            }
            for e, b, t, r, s in zip(held_out, base_ids, tuned_ids, litert_ids, same)
        ],
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out / 'results.json'} ({times['total_s']:.0f} s in all)")
    return results


if __name__ == "__main__":
    main()
