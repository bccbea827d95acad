"""Benchmark: a decoder LM to android, tpuedge against litert-torch's HF export, in one run.

For each recipe, each side exports SmolLM2-135M-Instruct (bench/llm_models.py) with the same
prefill and cache lengths in a fresh process (wall time, CPU time, peak RSS: bench/peak_rss.py);
then this process measures both files the same way:
  - file size, and tpuedge's against the int8/int4 parameter bytes (the tied table once);
  - teacher-forced top-1 agreement and perplexity against the float IR in torch, on held-out
    text of tpuedge's corpus (--positions next-token predictions; the peer's file never saw it
    either, tpuedge's search read only the other half);
  - the greedy continuation of a prompt against transformers' fp32 `generate`;
  - prefill and decode tokens/s in the LiteRT interpreter at 1 and 2 threads, through the same
    Python loop (bench/llm_runtimes.py).
tpuedge's export time is its build's stages up to the written model (TPUEDGE_STAGE_TIMES), its
accuracy measurement counted apart; the peer measures nothing.

    python bench/llm.py                                       # none, dynamic-int8, weight-only-int8, int4-block32
    python bench/llm.py --recipes dynamic-int8 --peer-python ../peer/venv/bin/python

The peer needs TensorFlow importable (tpuedge does not): give a Python of an environment with
litert-torch 0.10 and tensorflow-cpu (docs/language-models.md says how); without one, its rows are empty.
Writes bench/results/llm.json. The machine is shared and noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from llm_models import smollm2_folder  # noqa: E402  (bench/ is this script's folder)
from llm_runtimes import PeerStepRunner, speed  # noqa: E402

PEER_RECIPES = {
    "none": "none",
    "weight-only-int8": "weight_only_wi8_afp32",
    "dynamic-int8": "dynamic_wi8_afp32",
    "int4-block32": "dynamic_wi4b32_afp32",
}
# the stages of a build that come after its model is written: measuring it, not exporting it
ACCURACY_STAGES = ("token accuracy (LiteRT vs the float IR in torch)",)
PROMPT = "The capital of France is"


def _child(command: list[str], report: Path, env: dict | None = None) -> dict:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return {
            "error": (done.stderr or done.stdout).strip().splitlines()[-1][:300]
            if (done.stderr or done.stdout)
            else "failed"
        }
    return {"wall_s": round(wall, 1), "peak_rss_mb": json.loads(report.read_text())["peak_rss_mb"]}


def export_tpuedge(folder: Path, recipe: str, out: Path, prefill: int, cache: int) -> dict:
    report, stages = out.parent / f"{out.name}.rss.json", out.parent / f"{out.name}.stages.json"
    command = [
        sys.executable,
        str(HERE / "peak_rss.py"),
        str(report),
        "-m",
        "tpuedge.cli",
        "build",
        str(folder),
        "--target",
        "android",
        "--quantize",
        recipe,
        "--prefill-lengths",
        str(prefill),
        "--cache-length",
        str(cache),
        "--min-top1",
        "0",
        "--max-perplexity-increase",
        "1000",
        "--no-cache",
        "--out",
        str(out),
    ]
    result = _child(command, report, {"TPUEDGE_STAGE_TIMES": str(stages), "JAX_PLATFORMS": "cpu"})
    if "error" not in result:
        times = json.loads(stages.read_text())["stages"]
        measuring = sum(times.get(s, 0.0) for s in ACCURACY_STAGES)
        result.update(
            export_s=round(result["wall_s"] - measuring, 1),
            accuracy_stage_s=round(measuring, 1),
            file=str(out / "model.tflite"),
            build_accuracy=json.loads((out / "manifest.json").read_text())["accuracy"],
        )
    return result


def export_peer(python: str, folder: Path, recipe: str, out: Path, prefill: int, cache: int) -> dict:
    report = out.parent / f"{out.name}.rss.json"
    command = [
        python,
        str(HERE / "peak_rss.py"),
        str(report),
        "-m",
        "litert_torch.generative.export_hf",
        f"--model={folder}",
        f"--output_dir={out}",
        f"--prefill_lengths={prefill}",
        f"--cache_length={cache}",
        f"--quantization_recipe={PEER_RECIPES[recipe]}",
        "--bundle_litert_lm=False",
        "--keep_temporary_files=True",
    ]
    result = _child(command, report, {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if "error" not in result:
        result["export_s"] = result["wall_s"]
        result["file"] = str(out / ("model.tflite" if recipe == "none" else "model_quantized.tflite"))
    return result


def measure(file: str, runner_class, spec, reference_logits, sequences, prompt_ids, hf_greedy, prefill: int) -> dict:
    from tpuedge.quantize.lm_search import teacher_forced
    from tpuedge.quantize.token_metrics import matching_prefix, token_agreement
    from tpuedge.shared_ir.generative.generation import generate

    def runner(threads: int):
        if runner_class is PeerStepRunner:
            return PeerStepRunner(file, threads)
        return runner_class(Path(file).read_bytes(), spec, num_threads=threads)

    single = runner(1)
    agreement = token_agreement(reference_logits, teacher_forced(single, sequences), [s[1:] for s in sequences])
    greedy = generate(single, prompt_ids, len(hf_greedy)).new_ids
    return {
        "bytes": Path(file).stat().st_size,
        **agreement.to_json(),
        "greedy_matching_hf": matching_prefix(hf_greedy, greedy),
        "greedy_tokens": len(hf_greedy),
        "speed": {str(t): speed(single if t == 1 else runner(t), prefill, 64) for t in (1, 2)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default="none,dynamic-int8,weight-only-int8,int4-block32")
    parser.add_argument("--prefill", type=int, default=32)
    parser.add_argument("--cache", type=int, default=256)
    parser.add_argument("--positions", type=int, default=512, help="held-out next-token predictions measured")
    parser.add_argument("--greedy-tokens", type=int, default=64)
    parser.add_argument(
        "--peer-python",
        default=os.environ.get("TPUEDGE_PEER_PYTHON", ""),
        help="the Python of an environment with litert-torch 0.10 and tensorflow-cpu (or $TPUEDGE_PEER_PYTHON)",
    )
    parser.add_argument(
        "--model-dir", type=Path, help="a transformers causal-LM folder (default: SmolLM2-135M-Instruct)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "llm.json")
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    folder = args.model_dir or smollm2_folder()
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    peer = args.peer_python if args.peer_python and Path(args.peer_python).is_file() else None
    work = Path(tempfile.mkdtemp(prefix="tpuedge-bench-llm-"))
    rows = {}
    for recipe in recipes:
        rows[recipe] = {
            "tpuedge": export_tpuedge(folder, recipe, work / f"tpuedge-{recipe}", args.prefill, args.cache),
            "peer": export_peer(peer, folder, recipe, work / f"peer-{recipe}", args.prefill, args.cache)
            if peer
            else {"error": "no peer environment (--peer-python)"},
        }
        print(
            recipe,
            json.dumps(
                {side: {k: v for k, v in row.items() if k != "build_accuracy"} for side, row in rows[recipe].items()}
            ),
            flush=True,
        )

    import torch
    from transformers import AutoModelForCausalLM

    from tpuedge.edge.generative.litert_steps import LiteRTStepRunner
    from tpuedge.shared_ir.model_spec import load_program
    from tpuedge.quantize.lm_search import teacher_forced
    from tpuedge.quantize.lm_text import HELD_OUT, evaluation_text

    bundle = load_program(str(folder), {"prefill_lengths": str(args.prefill), "cache_length": args.cache})
    text = evaluation_text(
        bundle.tokenizer,
        half=HELD_OUT,
        sequence_length=128,
        positions=args.positions,
        vocab_size=bundle.decoder.vocab_size,
    )
    reference = teacher_forced(bundle.reference(), text.sequences)
    prompt_ids = bundle.tokenizer.encode(PROMPT)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        hf_greedy = hf.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=args.greedy_tokens,
            min_new_tokens=args.greedy_tokens,
            do_sample=False,
        )[0, len(prompt_ids) :].tolist()
    del hf
    parameter_bytes = {8: bundle.parameter_count, 4: bundle.parameter_count // 2, 32: 4 * bundle.parameter_count}
    for recipe, sides in rows.items():
        for side, row in sides.items():
            if "error" in row:
                continue
            runner_class = LiteRTStepRunner if side == "tpuedge" else PeerStepRunner
            row["measured"] = measure(
                row["file"],
                runner_class,
                bundle.decoder,
                reference,
                text.sequences,
                prompt_ids,
                hf_greedy,
                args.prefill,
            )
        bits = 32 if recipe == "none" else 4 if recipe.startswith("int4") else 8
        sides["parameter_bytes"] = parameter_bytes[bits]
    result = {
        "model": str(folder),
        "prefill": args.prefill,
        "cache": args.cache,
        "text": text.source,
        "positions": text.positions,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print_table(result)
    print(f"wrote {args.out}")


def print_table(result: dict) -> None:
    print(
        f"\n{result['model']}: prefill {result['prefill']}, cache {result['cache']}; accuracy on {result['positions']} "
        f"positions of {result['text']}"
    )
    head = (
        f"{'recipe':<18} {'side':<8} {'export s':>9} {'peak MB':>8} {'MiB':>8} {'x params':>8} {'top-1':>7} {'ppl':>8} "
        f"{'greedy':>7} {'pre 1t':>7} {'dec 1t':>7} {'pre 2t':>7} {'dec 2t':>7}"
    )
    print(head)
    for recipe, sides in result["rows"].items():
        for side in ("tpuedge", "peer"):
            row = sides[side]
            if "error" in row:
                print(f"{recipe:<18} {side:<8} {row['error'][:100]}")
                continue
            m = row.get("measured", {})
            s1, s2 = m.get("speed", {}).get("1", {}), m.get("speed", {}).get("2", {})
            print(
                f"{recipe:<18} {side:<8} {row['export_s']:>9.1f} {row['peak_rss_mb']:>8.0f} {m.get('bytes', 0) / 2**20:>8.1f} "
                f"{m.get('bytes', 0) / sides['parameter_bytes']:>8.3f} {100 * m.get('top1_agreement', 0):>6.1f}% "
                f"{m.get('perplexity', 0):>8.3f} {m.get('greedy_matching_hf', 0):>3}/{m.get('greedy_tokens', 0):<3} "
                f"{s1.get('prefill_tokens_per_s', 0):>7.1f} {s1.get('decode_tokens_per_s', 0):>7.1f} "
                f"{s2.get('prefill_tokens_per_s', 0):>7.1f} {s2.get('decode_tokens_per_s', 0):>7.1f}"
            )


if __name__ == "__main__":
    main()
