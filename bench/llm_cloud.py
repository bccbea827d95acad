"""Benchmark: a decoder LM on the cloud backend against torch on CPU, in one run.

On SmolLM2-135M-Instruct (bench/llm_models.py), float32:
  1. decode and prefill tokens/s of tpuedge's JAX decoder (cloud/generative/jax_decoder.py) on
     XLA:CPU against the same transformers model in torch eager and under `torch.compile`
     (mode default, dynamic=False, the decode step only), each with a `transformers.StaticCache`
     of the same length, at each --batches size; and whether tpuedge's 64 greedy tokens at batch 1
     are torch eager's;
  2. the LoRA train step (rank 8 on q_proj and v_proj, AdamW) of `tpuedge.cloud.train_step`
     against torch eager with peft, same model, batch, loss and optimizer;
  3. the TPU memory plan of the decode step per topology (compiled by XLA:TPU without a TPU,
     cloud/generative/decoder_tpu_plan.py) against weights + KV cache + activations by hand.

Prefill: tpuedge prefills one sequence per call into its row of the batched cache (as its
serving engine does), so a batch of B costs B calls; torch prefills the B rows in one call.
Decode feeds each step's greedy tokens back through the host on both sides.
tokens/s = B * tokens / seconds, the median of 3 timed windows after a warm-up whose time
(trace + compile + first run) is reported apart.

Threads, stated because they decide the numbers on a 2-vCPU machine: by default torch runs with
`torch.set_num_threads(1)` and XLA:CPU with one thread (`--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1`, set before jax loads); --threads 2 gives torch 2 threads and
XLA its default pool. On an accelerator (JAX_PLATFORMS=cuda) JAX runs on it, with no limit.

    python bench/llm_cloud.py                           # everything, batches 1 and 8
    python bench/llm_cloud.py --skip-lora --skip-plan --batches 8
    python bench/llm_cloud.py --decode-only --random-weights --batches 1,8   # tpuedge alone (bench/device_check.sh)

--random-weights: SmolLM2-135M's shapes with random weights (no download: speed only, the
greedy check is skipped). Writes bench/results/llm_cloud.json or --out. The machine is shared
and noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
PROMPT = "The capital of France is"
WINDOWS = 3
# SmolLM2-135M-Instruct's config.json (the architecture only), for --random-weights
SMOLLM2_SHAPES = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
)


def _median_rate(run_window, items: int) -> float:
    """items/s: the median over WINDOWS calls of `run_window` (each does `items` of work)."""
    rates = []
    for _ in range(WINDOWS):
        started = time.perf_counter()
        run_window()
        rates.append(items / (time.perf_counter() - started))
    return statistics.median(rates)


def random_folder(work: Path) -> Path:
    """A transformers folder of SmolLM2-135M's shapes, random weights, a small test tokenizer."""
    import torch
    import transformers

    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import tiny_lms

    folder = work / "random-smollm2-shapes"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2_SHAPES)).eval()
    model.save_pretrained(folder)
    (folder / "tokenizer.json").write_text(tiny_lms.tokenizer_json())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|endoftext|>"})
    )
    return folder


# ---- 1. decode and prefill -----------------------------------------------------------------
def tpuedge_speed(dec, batch: int, prefill: int, tokens: int) -> dict:
    import jax
    import numpy as np

    rng = np.random.default_rng(batch)
    prompt = rng.integers(3, 300, (1, prefill)).astype(np.int32)
    positions = np.arange(prefill, dtype=np.int32)[None]
    state = {"cache": dec.new_cache(batch)}

    def prefill_rows():
        for row in range(batch):
            state["cache"] = dec.prefill(state["cache"], row, f"prefill_{prefill}", prompt, positions)
        jax.block_until_ready(state["cache"])

    def decode_window():
        token = np.full((batch, 1), 7, np.int32)
        for i in range(tokens):
            _, greedy, state["cache"] = dec.decode(state["cache"], token, np.full((batch, 1), prefill + i, np.int32))
            token = np.asarray(greedy).reshape(batch, 1)  # the host reads each step's tokens, as a server does

    started = time.perf_counter()
    state["cache"] = dec.prefill(state["cache"], 0, f"prefill_{prefill}", prompt, positions)
    jax.block_until_ready(state["cache"])
    prefill_first = time.perf_counter() - started
    prefill_rate = _median_rate(prefill_rows, batch * prefill)
    started = time.perf_counter()
    _, greedy, state["cache"] = dec.decode(
        state["cache"], np.zeros((batch, 1), np.int32), np.full((batch, 1), prefill, np.int32)
    )
    np.asarray(greedy)
    decode_first = time.perf_counter() - started
    decode_rate = _median_rate(decode_window, batch * tokens)
    return {
        "prefill_tokens_per_s": prefill_rate,
        "decode_tokens_per_s": decode_rate,
        "prefill_first_call_s": prefill_first,
        "decode_first_call_s": decode_first,
    }


def torch_speed(hf, batch: int, prefill: int, tokens: int, cache_length: int, compiled: bool) -> dict:
    import torch
    from transformers import StaticCache

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(batch)
    prompt = torch.randint(3, 300, (batch, prefill), generator=g)
    cache = StaticCache(config=hf.config, max_cache_len=cache_length)

    def step(ids, cache_position):
        return hf(input_ids=ids, past_key_values=cache, cache_position=cache_position, use_cache=True).logits[:, -1]

    decode_step = torch.compile(step, dynamic=False) if compiled else step

    def prefill_batch():
        step(prompt, torch.arange(prefill))

    def decode_window():
        token = torch.full((batch, 1), 7, dtype=torch.long)
        for i in range(tokens):
            token = decode_step(token, torch.tensor([prefill + i])).argmax(-1, keepdim=True)

    with torch.no_grad():
        started = time.perf_counter()
        prefill_batch()
        prefill_first = time.perf_counter() - started
        prefill_rate = None if compiled else _median_rate(prefill_batch, batch * prefill)
        started = time.perf_counter()
        try:
            decode_step(torch.zeros((batch, 1), dtype=torch.long), torch.tensor([prefill]))
        except Exception as exc:  # torch.compile needs a working C++ toolchain: report, don't crash
            return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        decode_first = time.perf_counter() - started
        decode_rate = _median_rate(decode_window, batch * tokens)
    row = {"decode_tokens_per_s": decode_rate, "decode_first_call_s": decode_first}
    if not compiled:
        row.update(prefill_tokens_per_s=prefill_rate, prefill_first_call_s=prefill_first)
    return row


def greedy_check(dec, hf, tokenizer, n: int, cache_length: int) -> dict:
    """tpuedge's greedy tokens (the shared generation loop over the JAX steps) against torch
    eager's with a StaticCache: the prompt prefilled, then n - 1 decode steps."""
    import torch
    from transformers import StaticCache

    from tpuedge.quantize.token_metrics import matching_prefix
    from tpuedge.shared_ir.generative.generation import generate

    prompt = tokenizer.encode(PROMPT)
    ours = generate(dec.step_runner(), prompt, n).new_ids
    cache = StaticCache(config=hf.config, max_cache_len=cache_length)
    theirs = []
    with torch.no_grad():
        logits = hf(
            input_ids=torch.tensor([prompt]),
            past_key_values=cache,
            cache_position=torch.arange(len(prompt)),
            use_cache=True,
        ).logits[:, -1]
        for i in range(n):
            token = int(logits.argmax(-1))
            theirs.append(token)
            if i + 1 < n:
                logits = hf(
                    input_ids=torch.tensor([[token]]),
                    past_key_values=cache,
                    cache_position=torch.tensor([len(prompt) + i]),
                    use_cache=True,
                ).logits[:, -1]
    matching = matching_prefix(theirs, ours)
    return {
        "prompt": PROMPT,
        "tokens": n,
        "matching_prefix": matching,
        "identical": matching == n,
        "tpuedge_text": tokenizer.decode(ours),
        "torch_text": tokenizer.decode(theirs),
    }


# ---- 2. the LoRA train step ------------------------------------------------------------------
def lora_rows(folder: Path, batch: int, sequence: int, steps: int) -> dict:
    import jax
    import torch
    from transformers import AutoModelForCausalLM

    import tpuedge.cloud as tc
    from tpuedge.cloud.causal_lm import CausalLMLogits, NextTokenLoss

    ids = torch.randint(3, 300, (batch, sequence), generator=torch.Generator().manual_seed(0))
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rows = {}

    model = CausalLMLogits(copy.deepcopy(hf)).eval()
    started = time.perf_counter()
    step = tc.train_step(
        model,
        NextTokenLoss(),
        torch.optim.AdamW(model.parameters(), lr=1e-4),
        (ids, ids),
        lora=tc.LoraConfig(rank=8, targets=("q_proj", "v_proj")),
    )
    build_s = time.perf_counter() - started
    arrays = (jax.device_put(ids.numpy().astype("int32")),) * 2
    started = time.perf_counter()
    first_loss = float(step(*arrays))
    first_s = time.perf_counter() - started
    rate = _median_rate(lambda: [jax.block_until_ready(step(*arrays)) for _ in range(steps)], steps)
    rows["tpuedge"] = {
        "steps_per_s": rate,
        "capture_and_lower_s": build_s,
        "first_step_s": first_s,
        "first_loss": first_loss,
        "trained_values": int(sum(v.size for v in step.state["params"].values())),
    }
    step = model = None  # freed before the peer's model is built
    gc.collect()

    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        hf, LoraConfig(r=8, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    )
    peft_model.eval()  # no dropout on either side (tpuedge captures the model as it is)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    loss_fn = NextTokenLoss()

    def one():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(peft_model(input_ids=ids, use_cache=False).logits, ids)
        loss.backward()
        optimizer.step()
        return loss

    started = time.perf_counter()
    peft_first = float(one().detach())
    peft_first_s = time.perf_counter() - started
    rate = _median_rate(lambda: [one() for _ in range(steps)], steps)
    rows["peft_torch_eager"] = {
        "steps_per_s": rate,
        "first_step_s": peft_first_s,
        "first_loss": peft_first,
        "trained_values": int(sum(p.numel() for p in trainable)),
    }
    rows["speedup_vs_peft"] = rows["tpuedge"]["steps_per_s"] / rows["peft_torch_eager"]["steps_per_s"]
    rows["first_loss_rel_diff"] = abs(first_loss - peft_first) / abs(peft_first)
    rows.update(batch=batch, sequence=sequence, rank=8, targets=["q_proj", "v_proj"], optimizer="AdamW lr 1e-4")
    return rows


# ---- 3. the TPU memory plan ------------------------------------------------------------------
def hand_estimate(config, devices: int, batch: int, cache_length: int, program_weight_bytes: int) -> dict:
    """Per-device bytes of the decode step, from the model's config alone (float32):
    weights: every matrix split over the devices (the embedding / LM head over the vocabulary; a
        tied table counted once), the norms whole;
    KV cache: layers * 2 (K, V) * batch * kv_heads * cache_length * head_dim * 4, split over the
        devices when the KV heads divide by them, else whole on each;
    activations: the logits [batch, vocab] (f32, whole: the output) plus one layer's live
        scratch at a time, also whole: hidden states and q/k/v rows, the attention scores and
        probabilities [batch, heads, cache_length] and the MLP's gate and up [batch, intermediate]."""
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads, kv_heads, vocab = config.num_attention_heads, config.num_key_value_heads, config.vocab_size
    head_dim = getattr(config, "head_dim", None) or h // heads
    tied = bool(getattr(config, "tie_word_embeddings", False))
    matrices = layers * (2 * h * heads * head_dim + 2 * h * kv_heads * head_dim + 3 * h * inter) + vocab * h * (
        1 if tied else 2
    )
    norms = layers * 2 * h + h
    weights = 4 * matrices // devices + 4 * norms
    cache_split = devices if kv_heads % devices == 0 else 1
    cache = layers * 2 * batch * kv_heads * cache_length * head_dim * 4 // cache_split
    scratch = 4 * batch * (3 * h + (heads + 2 * kv_heads) * head_dim + 2 * heads * cache_length + 2 * inter)
    activations = 4 * batch * vocab + scratch
    return {
        "weight_bytes": weights,
        "cache_bytes": cache,
        "activation_bytes": activations,
        "total_bytes": weights + cache + activations,
        "cache_split_ways": cache_split,
        "tied_embedding": tied,
        "program_weight_bytes_unsplit": program_weight_bytes,
    }


def plan_rows(dec, config, topologies: list[str], batch: int) -> list[dict]:
    from tpuedge.cloud.generative.decoder_tpu_plan import decoder_tpu_plan
    from tpuedge.cloud.topologies import parse_topology

    rows = []
    for name in topologies:
        started = time.perf_counter()
        plan, status = decoder_tpu_plan(dec, parse_topology(name), batch=batch)
        seconds = time.perf_counter() - started
        if plan is None:
            rows.append({"topology": name, "error": status["status"]})
            continue
        step = plan["decode_step"]
        hand = hand_estimate(config, plan["devices"], batch, dec.spec.cache_length, dec.weight_bytes)
        rows.append(
            {
                "topology": name,
                "devices": plan["devices"],
                "device_kind": plan["device_kind"],
                "batch": batch,
                "plan_s": seconds,
                "compiled": step["hbm_per_device"],
                "plan_weight_bytes": step["weight_bytes_per_device"],
                "plan_cache_bytes": step["cache_bytes_per_device"],
                "hand": hand,
                "ratio_compiled_to_hand": step["hbm_per_device"]["total_bytes"] / hand["total_bytes"],
                "largest_batch": plan["largest_batch"].get("batch"),
                "device_hbm_bytes": plan["device_hbm_bytes"],
            }
        )
    return rows


# ---- tables ----------------------------------------------------------------------------------
def _rate(row: dict | None, key: str) -> str:
    if not row:
        return "-"
    if "error" in row:
        return "failed"
    return f"{row[key]:.1f}" if row.get(key) is not None else "-"


def print_tables(result: dict) -> None:
    mib = 2**20
    print(
        f"\n{result['model']}: float32, prefill {result['prefill']}, cache {result['cache']}, {result['tokens']} decode "
        f"tokens per window; {result['threads_note']}\n"
    )
    print("| batch | side | decode tok/s | prefill tok/s | decode vs eager | 1st decode call s |")
    print("|---:|---|---:|---:|---:|---:|")
    for row in result["speed"]:
        eager = row.get("torch_eager", {}).get("decode_tokens_per_s")
        for side, label in (
            ("tpuedge", "tpuedge JAX (XLA)"),
            ("torch_eager", "torch eager"),
            ("torch_compile", "torch.compile"),
        ):
            r = row.get(side)
            if r is None:
                continue
            ratio = f"{r['decode_tokens_per_s'] / eager:.2f}x" if eager and "decode_tokens_per_s" in r else "-"
            first = f"{r['decode_first_call_s']:.1f}" if "decode_first_call_s" in r else "-"
            print(
                f"| {row['batch']} | {label} | {_rate(r, 'decode_tokens_per_s')} | {_rate(r, 'prefill_tokens_per_s')} | "
                f"{ratio} | {first} |"
            )
    print(
        "\nPrefill: tpuedge one call per sequence (B calls for a batch of B, as its serving engine runs), torch the B rows "
        "in one call; torch.compile compiles the decode step only."
    )
    greedy = result.get("greedy")
    if greedy:
        print(
            f"\n64 greedy tokens identical to torch fp32: {'yes' if greedy['identical'] else 'no'} "
            f"(matching prefix {greedy['matching_prefix']}/{greedy['tokens']}, prompt {greedy['prompt']!r})"
        )
    lora = result.get("lora")
    if lora:
        print(
            f"\nLoRA train step, batch {lora['batch']} x {lora['sequence']} tokens, rank {lora['rank']} on "
            f"{'/'.join(lora['targets'])}, {lora['optimizer']}:\n"
        )
        print("| side | steps/s | first step s | first loss | trained values |")
        print("|---|---:|---:|---:|---:|")
        for side, label in (
            ("tpuedge", "tpuedge train_step(lora=...) (XLA)"),
            ("peft_torch_eager", "peft, torch eager"),
        ):
            r = lora[side]
            print(
                f"| {label} | {r['steps_per_s']:.3f} | {r['first_step_s']:.1f} | {r['first_loss']:.4f} | {r['trained_values']:,} |"
            )
        print(
            f"\ntpuedge / peft: {lora['speedup_vs_peft']:.2f}x; first loss relative difference {lora['first_loss_rel_diff']:.1e}; "
            f"tpuedge capture + lowering {lora['tpuedge']['capture_and_lower_s']:.1f} s, first step (compile) "
            f"{lora['tpuedge']['first_step_s']:.1f} s"
        )
    plans = result.get("plan")
    if plans:
        print(f"\nTPU memory plan of the decode step, batch {plans[0].get('batch', '-')}, MiB per device:\n")
        print(
            "| topology | devices | compiled total | weights (plan / hand) | KV cache (plan / hand) | temporaries | code | "
            "activations (hand) | hand total | compiled / hand | largest batch |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in plans:
            if "error" in p:
                print(f"| {p['topology']} | {p['error']} |")
                continue
            c, h = p["compiled"], p["hand"]
            print(
                f"| {p['topology']} | {p['devices']} | {c['total_bytes'] / mib:.1f} | {p['plan_weight_bytes'] / mib:.1f} / "
                f"{h['weight_bytes'] / mib:.1f} | {p['plan_cache_bytes'] / mib:.1f} / {h['cache_bytes'] / mib:.1f} | "
                f"{c['temp_bytes'] / mib:.1f} | {c['generated_code_bytes'] / mib:.1f} | {h['activation_bytes'] / mib:.1f} | "
                f"{h['total_bytes'] / mib:.1f} | "
                f"{p['ratio_compiled_to_hand']:.3f} | {p['largest_batch']} |"
            )
    if result.get("serve"):
        from llm_serve import print_serve_table

        print_serve_table(result["serve"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model-dir", type=Path, help="a transformers causal-LM folder (default: SmolLM2-135M-Instruct)"
    )
    parser.add_argument(
        "--random-weights", action="store_true", help="SmolLM2-135M's shapes with random weights (speed only)"
    )
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prefill", type=int, default=32)
    parser.add_argument("--cache", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=32, help="decode steps per timed window")
    parser.add_argument("--greedy-tokens", type=int, default=64)
    parser.add_argument(
        "--threads", choices=("1", "2"), default="1", help="torch threads; 1 also holds XLA:CPU to one thread"
    )
    parser.add_argument(
        "--decode-only", action="store_true", help="tpuedge's decode and prefill alone (no torch, LoRA or plan)"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--skip-lora", action="store_true")
    parser.add_argument("--lora-batch", type=int, default=4)
    parser.add_argument("--lora-sequence", type=int, default=64)
    parser.add_argument("--lora-steps", type=int, default=2, help="train steps per timed window")
    parser.add_argument("--skip-plan", action="store_true")
    parser.add_argument("--topologies", default="v5e:2x2,v6e:2x2")
    parser.add_argument("--plan-batch", type=int, default=8)
    parser.add_argument("--skip-serve", action="store_true")
    parser.add_argument("--serve-clients", default="1,8")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "llm_cloud.json")
    args = parser.parse_args()
    if args.prefill + 1 + args.tokens > args.cache or args.greedy_tokens + 16 > args.cache:
        parser.error("--prefill + --tokens (and the greedy check) must fit in --cache")

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    on_cpu = os.environ["JAX_PLATFORMS"].split(",")[0] == "cpu"
    if on_cpu and args.threads == "1":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + SINGLE_THREAD_XLA).strip()
    import jax
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tpuedge.cloud.generative.jax_decoder import JaxDecoder
    from tpuedge.shared_ir.model_spec import load_program

    torch.set_num_threads(int(args.threads))
    work = Path(tempfile.mkdtemp(prefix="tpuedge-bench-llm-cloud-"))
    if args.random_weights:
        folder = random_folder(work)
    else:
        from llm_models import smollm2_folder  # bench/ is this script's folder

        folder = args.model_dir or smollm2_folder()
    batches = [int(b) for b in args.batches.split(",") if b.strip()]

    started = time.perf_counter()
    bundle = load_program(str(folder), {"prefill_lengths": str(args.prefill), "cache_length": args.cache})
    dec = JaxDecoder(bundle)
    capture_s = time.perf_counter() - started
    device = jax.devices()[0]
    threads_note = (
        f"torch.set_num_threads({args.threads}), XLA:CPU "
        + ("one thread (" + SINGLE_THREAD_XLA + ")" if args.threads == "1" else "default thread pool")
        if device.platform == "cpu"
        else f"JAX on {device.device_kind}"
    )
    result = {
        "benchmark": "llm_cloud",
        "model": "SmolLM2-135M shapes, random weights" if args.random_weights else folder.name,
        "prefill": args.prefill,
        "cache": args.cache,
        "tokens": args.tokens,
        "threads_note": threads_note,
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "jax_device": device.device_kind,
        },
        "versions": {"jax": jax.__version__, "torch": torch.__version__},
        "capture_and_lower_s": capture_s,
        "decoder_weight_bytes": dec.weight_bytes,
        "parameter_count": bundle.parameter_count,
        "speed": [],
    }

    hf = None if args.decode_only else AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    for batch in batches:
        row = {"batch": batch, "tpuedge": tpuedge_speed(dec, batch, args.prefill, args.tokens)}
        if hf is not None:
            row["torch_eager"] = torch_speed(hf, batch, args.prefill, args.tokens, args.cache, compiled=False)
            if not args.no_compile:
                row["torch_compile"] = torch_speed(hf, batch, args.prefill, args.tokens, args.cache, compiled=True)
            row["decode_speedup_vs_eager"] = (
                row["tpuedge"]["decode_tokens_per_s"] / row["torch_eager"]["decode_tokens_per_s"]
            )
        result["speed"].append(row)
        print(f"batch {batch}: {json.dumps(row)}", flush=True)
    if hf is not None and not args.random_weights:
        result["greedy"] = greedy_check(dec, hf, bundle.tokenizer, args.greedy_tokens, args.cache)
        print(f"greedy: {json.dumps(result['greedy'])}", flush=True)
    del hf
    gc.collect()
    if not args.decode_only and not args.skip_lora:
        result["lora"] = lora_rows(folder, args.lora_batch, args.lora_sequence, args.lora_steps)
        print(f"lora: {json.dumps(result['lora'])}", flush=True)
    if not args.decode_only and not args.skip_plan:
        config = AutoConfig.from_pretrained(folder)
        result["plan"] = plan_rows(
            dec, config, [t.strip() for t in args.topologies.split(",") if t.strip()], args.plan_batch
        )
    if not args.decode_only and not args.skip_serve:
        from llm_serve import serve_rows  # bench/ is this script's folder

        clients = [int(c) for c in args.serve_clients.split(",") if c.strip()]
        result["serve"] = serve_rows(folder, args.prefill, args.cache, clients, args.tokens)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print_tables(result)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
