"""Benchmark: one train step across processes on host CPU devices, and its Orbax checkpoints.

For 8 host devices split as 1x8, 2x4 and 4x2 (processes x devices, started by
`python -m tpuedge.cloud.launch`), on MLPs of growing width (AdamW, global batch --batch,
mesh --mesh over all 8 devices):
  1. the step time: the median of --steps timed steps after 3 warm-up steps, each read back
     (`float(loss)`), so it is the time to the loss, collectives included;
  2. an async `step.save(folder)` in a folder already in use: how long the call blocks the
     training loop (until the state is off the devices), as a share of one step; the first save
     in a folder (it also sets up Orbax's manager) apart; the step run while the checkpoint is
     written; the whole write (`wait_until_saved`); the checkpoint's bytes on disk against the
     parameter bytes (AdamW adds two moments);
  3. `step.resume(folder)`: the restore time onto the same mesh.

    python bench/multiprocess.py                      # widths 256,1024,2048, mesh fsdp
    python bench/multiprocess.py --widths 512 --mesh data --steps 10

Every process has the host's cores to share (2 here), so more processes mean more contention,
not more compute: the numbers say what the cross-process runtime costs, not TPU speed-ups.
Writes bench/results/multiprocess.json or --out; `--table JSON` prints a saved result's table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYOUTS = ((1, 8), (2, 4), (4, 2))
ROOT = Path(__file__).resolve().parents[1]


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def worker(opts) -> None:
    """One process of the job: time the steps and the checkpoint of each width."""
    import jax
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import tpuedge.cloud

    torch.manual_seed(0)
    torch.set_num_threads(1)
    count, index = jax.process_count(), jax.process_index()
    mesh = f"{opts.mesh}:{jax.device_count()}"
    rows = opts.batch // count
    rng = np.random.default_rng(index)
    x = torch.from_numpy(rng.standard_normal((rows, 256)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, rows))
    results = []
    for width in opts.widths:
        model = nn.Sequential(
            nn.Linear(256, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, 10),
        )
        step = tpuedge.cloud.train_step(
            model, F.cross_entropy, torch.optim.AdamW(model.parameters(), lr=1e-3), (x, y), mesh=mesh
        )
        for _ in range(3):
            float(step(x, y))
        times = []
        for _ in range(opts.steps):
            start = time.perf_counter()
            float(step(x, y))
            times.append(time.perf_counter() - start)
        step_s = statistics.median(times)
        folder = Path(opts.work) / f"ck{width}"
        start = time.perf_counter()
        step.save(folder)  # the first save in a folder also sets up Orbax's manager for it
        first_s = time.perf_counter() - start
        step.wait_until_saved()
        float(step(x, y))
        start = time.perf_counter()
        step.save(folder)
        blocked_s = time.perf_counter() - start
        float(step(x, y))  # the loop goes on while the checkpoint is written
        during_s = time.perf_counter() - start - blocked_s
        step.wait_until_saved()
        written_s = time.perf_counter() - start
        start = time.perf_counter()
        step.resume(folder)
        float(step.state["step"])
        restore_s = time.perf_counter() - start
        param_bytes = sum(v.size * v.dtype.itemsize for v in step.state["params"].values())
        results.append(
            {
                "width": width,
                "param_bytes": int(param_bytes),
                "step_s": step_s,
                "save_blocks_s": blocked_s,
                "save_blocks_share_of_step": blocked_s / step_s,
                "first_save_blocks_s": first_s,
                "step_while_writing_s": during_s,
                "save_written_s": written_s,
                "restore_s": restore_s,
                "checkpoint_bytes": _folder_bytes(folder / str(step.step_count)) if index == 0 else None,
            }
        )
    if index == 0:
        Path(opts.out).write_text(json.dumps(results))


def _run_layout(processes: int, devices: int, opts, work: Path) -> list[dict]:
    out = work / f"{processes}x{devices}.json"
    command = [
        sys.executable,
        "-m",
        "tpuedge.cloud.launch",
        "--processes",
        str(processes),
        "--devices-per-process",
        str(devices),
        "--timeout",
        str(opts.timeout),
        __file__,
        "--worker",
        "--out",
        str(out),
        "--work",
        str(work / f"{processes}x{devices}"),
        "--widths",
        ",".join(map(str, opts.widths)),
        "--mesh",
        opts.mesh,
        "--steps",
        str(opts.steps),
        "--batch",
        str(opts.batch),
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=opts.timeout + 60)
    if done.returncode:
        sys.exit(f"the {processes}x{devices} job failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def markdown_table(result: dict) -> str:
    rows = result["rows"]
    base = {r["width"]: r["step_s"] for r in rows if r["layout"] == "1x8"}
    lines = [
        f"mesh {result['mesh']}:8, global batch {result['batch']}, AdamW; times in ms, step: the median of "
        f"{result['steps']} steps",
        "",
        "| processes x devices | width | params MB | step | vs 1x8 | save blocks | of a step | first save | step while "
        "writing | written | restore | checkpoint MB | / params |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ckpt = r["checkpoint_bytes"]
        lines.append(
            f"| {r['layout']} | {r['width']} | {r['param_bytes'] / 1e6:.2f} | {r['step_s'] * 1e3:.1f} | "
            f"{r['step_s'] / base[r['width']]:.2f}x | {r['save_blocks_s'] * 1e3:.1f} | "
            f"{100 * r['save_blocks_share_of_step']:.1f}% | {r['first_save_blocks_s'] * 1e3:.1f} | "
            f"{r['step_while_writing_s'] * 1e3:.1f} | {r['save_written_s'] * 1e3:.1f} | {r['restore_s'] * 1e3:.1f} | "
            f"{ckpt / 1e6:.2f} | {ckpt / r['param_bytes']:.2f}x |"
        )
    widest = max(base)
    worst = result["largest_save_blocks_worst_share"]
    lines += [
        "",
        f"Goal, an async save blocks at most 10% of a step on the largest model (width {widest}): "
        f"worst {100 * worst:.1f}%, {'met' if worst <= 0.10 else 'not met'}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")], default=[256, 1024, 2048])
    parser.add_argument("--mesh", choices=("data", "fsdp"), default="fsdp")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "multiprocess.json"))
    parser.add_argument("--table", metavar="JSON", help="print the table of a saved result and stop")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        return worker(opts)
    if opts.table:
        return print(markdown_table(json.loads(Path(opts.table).read_text())))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tpuedge-bench-mp-") as work:
        for processes, devices in LAYOUTS:
            for r in _run_layout(processes, devices, opts, Path(work)):
                rows.append({"layout": f"{processes}x{devices}", **r})
                print(f"{processes}x{devices} width {r['width']}: done", file=sys.stderr, flush=True)
    largest = max(opts.widths)
    worst = max(r["save_blocks_share_of_step"] for r in rows if r["width"] == largest)
    result = {
        "mesh": opts.mesh,
        "batch": opts.batch,
        "steps": opts.steps,
        "rows": rows,
        "largest_save_blocks_worst_share": worst,
    }
    print(markdown_table(result))
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
