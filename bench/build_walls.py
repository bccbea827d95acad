"""Benchmark: wall time of whole `tpuedge build` processes, cold and cached, for two goals.

    python bench/build_walls.py --compare cloud --models crepe_tiny,silero_vad,mtcnn_onet
        cold cloud-tpu build (libtpu's deviceless compile included) / cold android float build of
        the same model, each a fresh process, the build cache off; goal: median <= 1.5
    python bench/build_walls.py --compare rebuild --models minilm_l6 --quantize int8
        cached rebuild / cold build of an android int8 build from the zoo's Python factory (the
        rebuild pays the factory, the imports and the capture); goal: <= 0.3
    ... --checkout DIR    time another checkout of tpuedge (e.g. `git archive REV | tar -x -C DIR`)
        with the same models, samples and bench code: the before/after numbers of one run

Each row lists the build's largest stages (TPUEDGE_STAGE_TIMES, shared_ir/stage_times.py).
Writes bench/results/build_walls.json. The machine is shared and noisy: compare ratios of one run.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GOALS = {"cloud": 1.5, "rebuild": 0.3}


def run_build(checkout: Path, spec: str, out: Path, cache: Path | None, args: list[str]) -> dict:
    """One build in a child process (cache folder `cache`, or off): wall seconds and its stages."""
    with tempfile.TemporaryDirectory() as tmp:
        stages_file = Path(tmp) / "stages.json"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(checkout), str(HERE)]),
            "TPUEDGE_STAGE_TIMES": str(stages_file),
        }
        env.setdefault("JAX_PLATFORMS", "cpu")
        env.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
        if cache is None:
            env["TPUEDGE_NO_CACHE"] = "1"
        else:
            env.pop("TPUEDGE_NO_CACHE", None)
            env["TPUEDGE_CACHE_DIR"] = str(cache)
        command = [sys.executable, "-m", "tpuedge.cli", "build", spec, "--out", str(out), *args]
        started = time.perf_counter()
        proc = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"build failed ({' '.join(command)}):\n{proc.stderr[-3000:]}")
        written = json.loads(stages_file.read_text()) if stages_file.exists() else {}
    stages = dict(sorted(written.get("stages", {}).items(), key=lambda kv: -kv[1]))
    return {
        "wall_s": round(wall, 2),
        "stages": {k: round(v, 2) for k, v in stages.items()},
        "cpu_s": written.get("process_cpu_s"),
    }


def _top(row: dict, count: int = 4) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in list(row["stages"].items())[:count])


def compare_cloud(checkout: Path, name: str, work: Path) -> dict:
    spec = f"{HERE}/zoo_specs.py:{name}"
    android = run_build(checkout, spec, work / f"{name}-android", None, ["--target", "android", "--quantize", "none"])
    cloud = run_build(checkout, spec, work / f"{name}-cloud", None, ["--target", "cloud-tpu"])
    return {
        "model": name,
        "android_float": android,
        "cloud_tpu": cloud,
        "ratio": round(cloud["wall_s"] / android["wall_s"], 3),
    }


def compare_rebuild(checkout: Path, name: str, work: Path, quantize: str) -> dict:
    from cache import zoo_calibration  # bench/cache.py: the zoo model's own samples

    spec = f"{HERE}/zoo_specs.py:{name}"
    args = ["--target", "android", "--quantize", quantize]
    if quantize == "int8":  # the bench times the build: a model below the budget is still written
        args += ["--calibration", zoo_calibration(name, spec, work), "--eval", "none", "--allow-below-budget"]
    cache = work / f"{name}-cache"
    cold = run_build(checkout, spec, work / f"{name}-cold", cache, args)
    cached = run_build(checkout, spec, work / f"{name}-cached", cache, args)
    return {"model": name, "cold": cold, "cached": cached, "ratio": round(cached["wall_s"] / cold["wall_s"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", choices=tuple(GOALS), required=True)
    parser.add_argument("--models", default="crepe_tiny,silero_vad,mtcnn_onet", help="zoo models, comma separated")
    parser.add_argument("--quantize", default="int8", help="--compare rebuild: android's scheme")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the tpuedge checkout to time (default: this one)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from checkout_bytecode import compile_checkout

    checkout = args.checkout.resolve()
    compile_checkout(checkout)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tpuedge-build-walls-") as tmp:
        for name in filter(None, args.models.split(",")):
            work = Path(tmp) / name
            work.mkdir()
            row = (
                compare_cloud(checkout, name, work)
                if args.compare == "cloud"
                else compare_rebuild(checkout, name, work, args.quantize)
            )
            rows.append(row)
            sides = ("android_float", "cloud_tpu") if args.compare == "cloud" else ("cold", "cached")
            print(
                f"{name}: "
                + "; ".join(f"{s} {row[s]['wall_s']:.1f} s ({_top(row[s])})" for s in sides)
                + f"; ratio {row['ratio']:.2f}",
                flush=True,
            )
    median = statistics.median(r["ratio"] for r in rows)
    print(
        f"\n{args.compare}: median ratio {median:.2f} over {len(rows)} model(s) (goal <= {GOALS[args.compare]}), "
        f"checkout {checkout}"
    )
    out = ROOT / "bench" / "results" / "build_walls.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "compare": args.compare,
        "checkout": str(checkout),
        "rows": rows,
        "median_ratio": median,
        "goal": GOALS[args.compare],
    }
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
