"""Benchmark: where a cold build's time goes, tpuedge against the peer, each a fresh process.

For each zoo model (bench/zoo_models.py) one cold `tpuedge build` child (CLI, --no-cache; android
float by default) reports its stages through TPUEDGE_STAGE_TIMES (shared_ir/stage_times.py: each
second counted once, a stage inside another taken out of the outer one). The peer child times
its own phases: import torch, the model factory, import litert-torch, `litert_torch.convert`,
writing. tpuedge's stages include its start-up (the interpreter, tpuedge's and click's imports);
"process start, CLI, exit" is the child's wall time less its stages: for tpuedge, starting the
process and leaving it; for the peer, everything before its first phase and its teardown. The `tpuedge` command leaves by os._exit once its
output is written; the peer's script ends the usual way, tearing down an interpreter that loaded
torch, JAX and litert-torch (~1.2-2 s, measured per model: `teardown_s`). The summary gives the
median wall ratio both as each side runs and against the peer's wall without its teardown.

    python bench/cold_profile.py                                  # mtcnn_onet, kws_dscnn, tv_resnet18
    python bench/cold_profile.py --models minilm_l6 --target mcu  # mcu and cloud-tpu have no peer row
    python bench/cold_profile.py --models minilm_l6 --quantize int8  # the int8 search's stages; the
        # peer: ai-edge-quantizer's static int8 (bench/peer.py) on the same calibration samples
Writes bench/results/cold_profile.json. The machine is shared and noisy: one run, ratios within it.
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

from cache import zoo_calibration  # bench/cache.py (this script's folder is on sys.path)
from checkout_bytecode import compile_checkout

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_MODELS = ("mtcnn_onet", "kws_dscnn", "tv_resnet18")
OTHER = "process start, CLI, exit"


def _child_env(**extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), "TPUEDGE_NO_CACHE": "1", **extra}
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    return env


def _run(module_args: list[str], env: dict) -> tuple[float, float, str]:
    """Run `python -m MODULE ARGS` as a child: wall seconds, its own peak RSS (MB, bench/peak_rss.py:
    wait4's figure would be at least this process's own), stderr; raises on failure."""
    with tempfile.TemporaryFile("w+") as err, tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "rss.json"
        command = [sys.executable, str(HERE / "peak_rss.py"), str(report), "-m", *module_args]
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=ROOT)
        proc.wait()
        wall = time.perf_counter() - started
        err.seek(0)
        stderr = err.read()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(module_args[:6])} ... failed:\n{stderr[-3000:]}")
        return wall, json.loads(report.read_text())["peak_rss_mb"], stderr


def tpuedge_side(name: str, target: str, quantize: str, folder: Path) -> dict:
    times = folder / f"{name}-{target}-stages.json"
    command = [
        "tpuedge.cli",
        "build",
        f"{HERE}/zoo_specs.py:{name}",
        "--target",
        target,
        "--no-cache",
        "--out",
        str(folder / f"{name}-{target}"),
    ]
    if target == "android":
        command += ["--quantize", quantize]
    if target == "mcu" or quantize == "int8":  # the bench times the build: a model below the budget is still written
        calibration = zoo_calibration(name, f"{HERE}/zoo_specs.py:{name}", folder)  # bench/cache.py's
        command += ["--calibration", calibration, "--eval", "none", "--allow-below-budget"]
    wall, rss, _ = _run(command, _child_env(TPUEDGE_STAGE_TIMES=str(times)))
    stages = json.loads(times.read_text())["stages"]
    stages[OTHER] = max(0.0, wall - sum(stages.values()))
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(rss, 1),
        "stages": {k: round(v, 3) for k, v in stages.items()},
    }


def peer_side(name: str, quantize: str, folder: Path) -> dict:
    times = folder / f"{name}-peer-stages.json"
    command = ["cold_profile", "--peer-child", name, quantize, str(times), str(folder / f"{name}-peer.tflite")]
    wall, rss, _ = _run(command, _child_env())
    ended_at = time.time()
    written = json.loads(times.read_text())
    stages = written["stages"]
    stages[OTHER] = max(0.0, wall - sum(stages.values()))
    # the script ends the usual way: the interpreter's teardown (torch, JAX, litert-torch loaded)
    # is in its wall time; the `tpuedge` command skips it (os._exit once its output is written)
    teardown = max(0.0, ended_at - written["done_at"])
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(rss, 1),
        "teardown_s": round(teardown, 3),
        "stages": {k: round(v, 3) for k, v in stages.items()},
    }


def peer_child(name: str, quantize: str, times_path: str, out: str) -> None:
    """`litert_torch.convert` straight from the zoo's module (then ai-edge-quantizer for int8,
    bench/peer.py), its phases timed like tpuedge's."""
    stages: dict[str, float] = {}

    def phase(stage: str, started: float) -> float:
        now = time.perf_counter()
        stages[stage] = now - started
        return now

    t = time.perf_counter()
    import torch  # noqa: F401

    t = phase("import torch", t)
    from zoo_models import ZOO

    module, example = ZOO[name].build()
    t = phase("model factory (user code: imports, weights)", t)
    import litert_torch

    t = phase("import litert-torch and jax", t)
    if quantize == "int8":
        from cache import CALIBRATION
        from peer import peer_convert

        calibration = ZOO[name].samples(CALIBRATION, 1)[0]  # the samples zoo_calibration gives tpuedge
        data = peer_convert(module, example, "int8", calibration)
        t = phase("litert_torch.convert + ai-edge-quantizer static int8", t)
    else:
        data = bytes(litert_torch.convert(module.eval(), example).model_content())
        t = phase("litert_torch.convert (export, decompositions, lowering)", t)
    Path(out).write_bytes(data)
    phase("writing", t)
    Path(times_path).write_text(json.dumps({"stages": stages, "done_at": time.time()}))


def format_rows(rows: list[dict]) -> str:
    stages: list[str] = []
    for row in rows:
        for side in ("tpuedge", "peer"):
            for stage in (row.get(side) or {}).get("stages", {}):
                if stage not in stages and stage != OTHER:
                    stages.append(stage)
    stages.append(OTHER)
    head = f"{'stage (seconds)':<58}" + "".join(f"{r['model'][:12] + ' ours':>18}{'peer':>8}" for r in rows)
    lines = [head]
    for stage in stages:
        cells = ""
        for r in rows:
            ours = r["tpuedge"]["stages"].get(stage)
            peer = (r.get("peer") or {}).get("stages", {}).get(stage)
            cells += f"{'' if ours is None else f'{ours:.2f}':>18}{'' if peer is None else f'{peer:.2f}':>8}"
        lines.append(f"{stage[:57]:<58}{cells}")
    for label, key in (("wall (s)", "wall_s"), ("peak RSS (MB)", "peak_rss_mb")):
        cells = "".join(f"{r['tpuedge'][key]:>18.2f}{(r.get('peer') or {}).get(key, float('nan')):>8.2f}" for r in rows)
        lines.append(f"{label:<58}{cells}")
    if all(r.get("peer") for r in rows):
        lines.append(f"{'wall, ours / peer':<58}" + "".join(f"{r['wall_ratio']:>18.2f}{'':>8}" for r in rows))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="zoo models, comma separated")
    parser.add_argument("--target", choices=("android", "mcu", "cloud-tpu"), default="android")
    parser.add_argument("--quantize", choices=("none", "int8"), default="none", help="android's scheme (default: none)")
    parser.add_argument("--peer-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_child:
        sys.path.insert(0, str(HERE))
        peer_child(*args.peer_child)
        return
    compile_checkout(ROOT)  # tpuedge timed with its bytecode, as installed (bench/checkout_bytecode.py)
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tpuedge-cold-profile-") as tmp:
        for name in filter(None, args.models.split(",")):
            row = {
                "model": name,
                "target": args.target,
                "tpuedge": tpuedge_side(name, args.target, args.quantize, Path(tmp)),
            }
            if args.target == "android":
                row["quantize"] = args.quantize
                row["peer"] = peer_side(name, args.quantize, Path(tmp))
                row["wall_ratio"] = round(row["tpuedge"]["wall_s"] / row["peer"]["wall_s"], 3)
                peer_working = row["peer"]["wall_s"] - row["peer"]["teardown_s"]
                row["wall_ratio_peer_without_teardown"] = round(row["tpuedge"]["wall_s"] / peer_working, 3)
                row["rss_ratio"] = round(row["tpuedge"]["peak_rss_mb"] / row["peer"]["peak_rss_mb"], 3)
            rows.append(row)
            print(
                f"{name}: ours {row['tpuedge']['wall_s']:.1f} s"
                + (f", peer {row['peer']['wall_s']:.1f} s" if "peer" in row else ""),
                flush=True,
            )
    print()
    print(format_rows(rows))
    summary = {}
    if args.target == "android" and rows:
        # the project's goals against the peer: a float build, an int8 build
        goal_wall, goal_rss = (0.8, 1.0) if args.quantize == "none" else (2.0, 1.3)
        summary = {
            "median_wall_ratio": round(statistics.median(r["wall_ratio"] for r in rows), 3),
            "median_rss_ratio": round(statistics.median(r["rss_ratio"] for r in rows), 3),
            "goal_wall_ratio": goal_wall,
            "goal_rss_ratio": goal_rss,
            "median_wall_ratio_peer_without_teardown": round(
                statistics.median(r["wall_ratio_peer_without_teardown"] for r in rows), 3
            ),
            "median_peer_teardown_s": round(statistics.median(r["peer"]["teardown_s"] for r in rows), 3),
        }
        print(
            f"\nmedian wall ours/peer {summary['median_wall_ratio']:.2f} (goal <= {goal_wall}), "
            f"median peak RSS ours/peer {summary['median_rss_ratio']:.2f} (goal <= {goal_rss})"
        )
        print(
            f"the peer's script spent a median {summary['median_peer_teardown_s']:.2f} s tearing its interpreter down "
            f"after writing its file (ours leaves by os._exit); against its wall without that: "
            f"{summary['median_wall_ratio_peer_without_teardown']:.2f}"
        )
    out = ROOT / "bench" / "results" / "cold_profile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
