"""Training-step throughput on this CPU: tpuedge's jitted JAX step vs torch eager and torch.compile.

    python bench/cloud_step.py [--seconds 2] [--models mlp,cnn,transformer] [--device cpu|cuda] [--out FILE]

For the MLP, the CNN (conv-BN-ReLU, train-mode BatchNorm) and the transformer block of
examples/models.py, each runner trains a copy of the same initial model with AdamW on the same
fixed batch and we report steps/s (median of 3 timed windows) and the first step's time (for
the jitted/compiled runners: tracing + compilation).

Threads, stated because it decides the numbers on a 2-vCPU machine: torch runs with
`torch.set_num_threads(1)` (2 threads is 5-100x slower here, see docs/stack-facts.md), and XLA:CPU is held
to one thread too (`--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`, set
before jax loads), so the comparison is one core against one core. Pass --xla-threads all to
let XLA use its default thread pool instead.

--device cuda runs both sides on the GPU: JAX on XLA:GPU (JAX_PLATFORMS=cuda unless set) and torch
eager on CUDA, each timed step waiting for its device (block_until_ready / cuda.synchronize);
no thread limits then (bench/device_check.sh runs it that way).

Prints a table; writes bench/results/cloud_step[_cuda].json or --out (bench/results/ is git-ignored).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def _models(batch_scale: int = 1):
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from models import MLP, SmallCNN, TransformerBlock

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ce = torch.nn.functional.cross_entropy
    mse = torch.nn.functional.mse_loss
    return {
        "mlp": (MLP(), ce, torch.randn(64, 32, generator=g), torch.randint(0, 10, (64,), generator=g)),
        "cnn": (SmallCNN(), ce, torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)),
        "transformer": (
            TransformerBlock(),
            mse,
            torch.randn(8, 16, 64, generator=g),
            torch.randn(8, 16, 64, generator=g),
        ),
    }


def _timed(step, seconds: float, repeats: int = 3) -> tuple[float, int]:
    """(median steps/s over `repeats` windows of about `seconds` each, total steps run)."""
    rates, total = [], 0
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            step()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and n >= 5:
                break
        rates.append(n / elapsed)
        total += n
    return statistics.median(rates), total


def bench_tpuedge(model, loss_fn, x, y, seconds, device="cpu"):
    import jax
    import torch

    import tpuedge.cloud

    model = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    started = time.perf_counter()
    step = tpuedge.cloud.train_step(model, loss_fn, opt, (x, y))
    build_s = time.perf_counter() - started
    xs, ys = (
        jax.device_put(x.numpy()),
        jax.device_put(y.numpy().astype("int32") if y.dtype == torch.int64 else y.numpy()),
    )
    platform = next(iter(step.state["params"].values())).devices().pop().platform
    if (platform == "gpu") != (device == "cuda"):
        raise SystemExit(
            f"--device {device} but the JAX train step runs on {platform}; check JAX_PLATFORMS and jax[cuda]"
        )
    started = time.perf_counter()
    first_loss = float(step(xs, ys))  # float() waits for the result
    first_s = time.perf_counter() - started

    def one():
        jax.block_until_ready(step(xs, ys))

    rate, n = _timed(one, seconds)
    return {
        "steps_per_s": rate,
        "first_step_s": first_s,
        "capture_and_lower_s": build_s,
        "first_loss": first_loss,
        "steps": n,
        "platform": platform,
    }


def bench_torch(model, loss_fn, x, y, seconds, compiled: bool, device: str = "cpu"):
    import torch

    model = copy.deepcopy(model).train().to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model) if compiled else model
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def one():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()
        sync()
        return loss

    started = time.perf_counter()
    try:
        first_loss = float(one())
    except Exception as exc:  # torch.compile needs a working C++ toolchain; report, don't crash
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    first_s = time.perf_counter() - started
    rate, n = _timed(one, seconds)
    return {"steps_per_s": rate, "first_step_s": first_s, "first_loss": first_loss, "steps": n}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each of the 3 timed windows")
    parser.add_argument("--models", default="mlp,cnn,transformer")
    parser.add_argument("--xla-threads", choices=("1", "all"), default="1")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both sides train")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON path (default bench/results/cloud_step[_cuda].json)"
    )
    args = parser.parse_args(argv)

    cpu = args.device == "cpu"
    if cpu and args.xla_threads == "1":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + SINGLE_THREAD_XLA).strip()
    os.environ.setdefault("JAX_PLATFORMS", args.device)
    import jax
    import torch

    if cpu:
        torch.set_num_threads(1)
    elif not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a CUDA build of torch and a GPU")
    models = _models()
    rows = []
    for name in args.models.split(","):
        model, loss_fn, x, y = models[name]
        row = {
            "model": name,
            "batch": int(x.shape[0]),
            "tpuedge_jax": bench_tpuedge(model, loss_fn, x, y, args.seconds, args.device),
            "torch_eager": bench_torch(model, loss_fn, x, y, args.seconds, compiled=False, device=args.device),
        }
        if not args.no_compile:
            row["torch_compile"] = bench_torch(model, loss_fn, x, y, args.seconds, compiled=True, device=args.device)
        ours, eager = row["tpuedge_jax"], row["torch_eager"]
        row["speedup_vs_eager"] = ours["steps_per_s"] / eager["steps_per_s"]
        if "steps_per_s" in row.get("torch_compile", {}):
            row["speedup_vs_compile"] = ours["steps_per_s"] / row["torch_compile"]["steps_per_s"]
        row["first_loss_rel_diff"] = abs(ours["first_loss"] - eager["first_loss"]) / max(
            abs(eager["first_loss"]), 1e-12
        )
        rows.append(row)
        print(f"  {name}: done", file=sys.stderr)

    header = f"{'model':<12}{'batch':>6}{'tpuedge jax':>14}{'torch eager':>14}{'torch.compile':>15}{'vs eager':>10}{'vs compile':>11}{'1st step jax':>14}{'1st step compile':>18}{'1st loss rel diff':>19}"
    print(header)
    print("-" * len(header))
    for r in rows:
        tc = r.get("torch_compile", {})
        tc_rate = f"{tc['steps_per_s']:.0f}/s" if "steps_per_s" in tc else ("failed" if tc else "skipped")
        tc_first = f"{tc['first_step_s']:.2f} s" if "first_step_s" in tc else "-"
        vs_c = f"{r['speedup_vs_compile']:.2f}x" if "speedup_vs_compile" in r else "-"
        print(
            f"{r['model']:<12}{r['batch']:>6}{r['tpuedge_jax']['steps_per_s']:>12.0f}/s{r['torch_eager']['steps_per_s']:>12.0f}/s"
            f"{tc_rate:>15}{r['speedup_vs_eager']:>9.2f}x{vs_c:>11}{r['tpuedge_jax']['first_step_s']:>12.2f} s{tc_first:>18}{r['first_loss_rel_diff']:>19.1e}"
        )
    threads = (
        "torch: torch.set_num_threads(1); "
        f"XLA:CPU threads: {'1 (' + SINGLE_THREAD_XLA + ')' if args.xla_threads == '1' else 'default pool'}. "
        if cpu
        else f"device: {jax.devices()[0].device_kind} (JAX), {torch.cuda.get_device_name()} (torch). "
    )
    print("steps/s: median of 3 windows, AdamW, one fixed batch. " + threads + "1st step = trace + compile + run.")
    result = {
        "benchmark": "cloud_step",
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "versions": {"jax": jax.__version__, "torch": torch.__version__},
        "device": args.device,
        "device_kind": jax.devices()[0].device_kind,
        "threads": {"torch": 1, "xla": args.xla_threads} if cpu else "default",
        "seconds_per_window": args.seconds,
        "rows": rows,
    }
    out = args.out or RESULTS / ("cloud_step.json" if cpu else "cloud_step_cuda.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
