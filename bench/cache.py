"""Benchmark: what the build cache saves, every build a fresh `tpuedge build` child process.

Per model (wall time and peak RSS of each child, imports and model capture included):
  android cold       float android build (--quantize none --channels-last, the layout mcu builds
                     take, so both can share one float model) into an empty cache
  android cached     the same build again (every cached stage a hit)
  mcu cold           mcu build into another empty cache
  mcu after android  mcu build into the cache the android builds filled (the float model is shared)
  mcu cached         the mcu build again

and the ratios the cache has goals for (over the models' median): cached rebuild / cold
(goal <= 0.15) and mcu after android / mcu cold (goal <= 0.6), with whether the mcu build read
the android build's float model (not where mcu's own IR rewrites make it another program), and
where each mcu build after android spent its time (its stages, TPUEDGE_STAGE_TIMES: what a
shared float model does not save), and that ratio's floor: the share of the mcu cold build's
wall time the build after android spent getting its program (importing torch, loading the .pt2
or capturing), which every build that runs the IR pays and no cache entry can skip.

    python bench/cache.py                      # the bundled examples
    python bench/cache.py --models build_cnn   # a subset
    python bench/cache.py --models --spec tiny=path/to/zoo_model.py:build   # any MODEL spec
    python bench/cache.py --models --zoo mtcnn_onet,kws_dscnn   # zoo models (bench/zoo_specs.py), their own samples
    python bench/cache.py --models --zoo mtcnn_onet --pt2       # ... each first saved as a .pt2 (`tpuedge export`)
    python bench/cache.py ... --repeat 3       # each build's wall time the median of 3 rounds
Writes bench/results/cache.json. The machine is shared and noisy: one run, read ratios as such
(a single round's ratio moved by +-0.03 between runs of the same checkout here).
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

import numpy as np
from checkout_bytecode import compile_checkout  # bench/ is on sys.path (the script's folder)

from tpuedge.shared_ir.cache_keys import read_cache_line
from tpuedge.shared_ir.stage_times import STAGE_TIMES_ENV

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("build_mlp", "build_cnn", "build_depthwise", "build_transformer", "digits")
CALIBRATION = 32
GOALS = {"cached_rebuild": 0.15, "mcu_after_android": 0.6}
# the output folders each round compares (a1/a2: android cold/cached; m0/m1/m2: mcu cold/after android/cached)
_COMPARED = {
    "android_cached_vs_cold": ("a1", "a2"),
    "mcu_after_android_vs_cold": ("m0", "m1"),
    "mcu_cached_vs_cold": ("m0", "m2"),
}
# the stages that give a build its program (shared_ir/model_spec.py, shared_ir/capture.py): every
# build that runs the IR pays them, so no cache entry can take a build below their share
PROGRAM_STAGES = (
    "import torch",
    "model factory (user code: imports, weights)",
    "import torch.export (dynamo, functorch)",
    "capture (torch.export)",
    "load .pt2",
)


def _export_digits(folder: Path) -> tuple[str, str]:
    """A trained digits model saved as .pt2 (trained once here, not in every timed build) + its data."""
    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    import model as digits  # examples/digits/model.py
    import torch

    import tpuedge

    program = tpuedge.export(digits.train_digits_cnn(), (torch.zeros(1, 1, 8, 8),), name="digits")
    program.save(folder / "digits.pt2")
    x = np.stack([s[0] for s in digits.calibration(CALIBRATION)])
    np.savez(folder / "digits_cal.npz", **{program.inputs[0].name: x.astype(np.float32)})
    return str(folder / "digits.pt2"), str(folder / "digits_cal.npz")


def zoo_calibration(name: str, spec: str, folder: Path) -> str:
    """The zoo model's own samples (token ids must be in the vocabulary), keyed by input name."""
    sys.path.insert(0, str(ROOT / "bench"))
    import tpuedge.shared_ir.model_spec as model_spec
    from zoo_models import ZOO

    program = model_spec.load_program(spec)
    samples = ZOO[name].samples(CALIBRATION, 1)[0]
    path = folder / f"{name}_cal.npz"
    np.savez(path, **{s.name: np.stack([np.asarray(x[i]) for x in samples]) for i, s in enumerate(program.inputs)})
    return str(path)


def _saved_program(spec: str, path: Path) -> str:
    """The MODEL captured once and saved (what `tpuedge export MODEL -o path` writes)."""
    import tpuedge.shared_ir.model_spec as model_spec

    model_spec.load_program(spec).save(path)
    return str(path)


def _calibration_for(spec: str, folder: Path) -> str:
    """Random-normal calibration samples in the model's input shapes (the bench times builds, not accuracy)."""
    import tpuedge.shared_ir.model_spec as model_spec

    program = model_spec.load_program(spec)
    rng = np.random.default_rng(0)
    arrays = {s.name: rng.standard_normal((CALIBRATION, *s.shape)).astype(s.dtype) for s in program.inputs}
    path = folder / f"{program.name}_cal.npz"
    np.savez(path, **arrays)
    return str(path)


class BuildFailed(Exception):
    pass


def run_build(spec: str, target: str, out: Path, cache: Path, *extra: str) -> dict:
    """One `tpuedge build` in a child process: wall seconds, peak RSS, the cache line it printed."""
    env = {**os.environ, "TPUEDGE_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("TPUEDGE_NO_CACHE", None)
    with (
        tempfile.TemporaryFile("w+") as out_file,
        tempfile.TemporaryFile("w+") as err_file,
        tempfile.TemporaryDirectory() as tmp,
    ):
        # the child's own peak RSS (bench/peak_rss.py): wait4's would be at least this process's
        report, stages = Path(tmp) / "rss.json", Path(tmp) / "stages.json"
        env[STAGE_TIMES_ENV] = str(stages)  # where the build's seconds went (shared_ir/stage_times.py)
        command = [
            sys.executable,
            str(ROOT / "bench" / "peak_rss.py"),
            str(report),
            "-m",
            "tpuedge.cli",
            "build",
            spec,
            "--target",
            target,
            "--out",
            str(out),
            *extra,
        ]
        started = time.perf_counter()
        proc = subprocess.run(command, env=env, stdout=out_file, stderr=err_file, text=True)
        wall = time.perf_counter() - started
        out_file.seek(0), err_file.seek(0)
        stdout, stderr = out_file.read(), err_file.read()
        if proc.returncode != 0:
            raise BuildFailed(f"build failed ({' '.join(command)}):\n{stderr[-3000:]}")
        peak_rss_mb = json.loads(report.read_text())["peak_rss_mb"]
        # a build replayed whole ("cache: hit build") runs no stage and writes none
        seconds = json.loads(stages.read_text())["stages"] if stages.exists() else {}
    line = next((l for l in stdout.splitlines() if l.startswith("cache:")), "")
    return {"wall_s": round(wall, 3), "peak_rss_mb": peak_rss_mb, "cache": line, "stages": seconds}


def bench_model(name: str, spec: str, calibration: str, work: Path, repeat: int = 1) -> dict:
    """The five builds `repeat` times in turn, each round into caches of its own; each build's wall
    time and peak RSS are the median over the rounds, its outputs compared in every round."""
    # the bench times builds, not accuracy: a model below the mcu budget is still written
    mcu_args = ("--calibration", calibration, "--eval", "none", "--allow-below-budget")
    android_args = ("--quantize", "none", "--channels-last")  # mcu's layout: one float model for both
    rounds: list[dict] = []
    identical = dict.fromkeys(_COMPARED, True)
    for r in range(repeat):
        fresh, shared = work / f"{name}-{r}-cache-mcu-cold", work / f"{name}-{r}-cache-shared"
        out = {key: work / f"{name}-{r}-{key}" for key in ("a1", "a2", "m0", "m1", "m2")}
        builds = {
            "android_cold": run_build(spec, "android", out["a1"], shared, *android_args),
            "android_cached": run_build(spec, "android", out["a2"], shared, *android_args),
            "mcu_cold": run_build(spec, "mcu", out["m0"], fresh, *mcu_args),
            "mcu_after_android": run_build(spec, "mcu", out["m1"], shared, *mcu_args),
            "mcu_cached": run_build(spec, "mcu", out["m2"], shared, *mcu_args),
        }
        rounds.append(builds)
        for key, (a, b) in _COMPARED.items():
            identical[key] = identical[key] and _same_files(out[a], out[b])
    row: dict = {"model": name, "spec": spec, "rounds": repeat}
    for kind in rounds[0]:
        row[kind] = {
            "wall_s": round(statistics.median(b[kind]["wall_s"] for b in rounds), 3),
            "peak_rss_mb": round(statistics.median(b[kind]["peak_rss_mb"] for b in rounds), 1),
            "cache": rounds[-1][kind]["cache"],
            "stages": _median_stages([b[kind]["stages"] for b in rounds]),
            **({"wall_s_each": [b[kind]["wall_s"] for b in rounds]} if repeat > 1 else {}),
        }
    row["identical"] = identical
    row["byte_identical"] = all(identical.values())
    # whether the mcu build read the android build's float model (mcu's own IR rewrites, an
    # unrolled LSTM or GELU's form, make it another program and so another float model)
    row["float_model_shared"] = "float_tflite" in read_cache_line(row["mcu_after_android"]["cache"]).get("hit", [])
    row["ratios"] = {
        "android_cached_rebuild": round(row["android_cached"]["wall_s"] / row["android_cold"]["wall_s"], 3),
        "mcu_cached_rebuild": round(row["mcu_cached"]["wall_s"] / row["mcu_cold"]["wall_s"], 3),
        "mcu_after_android": round(row["mcu_after_android"]["wall_s"] / row["mcu_cold"]["wall_s"], 3),
        # of that ratio, the share the program's arrival takes: its floor while the build loads the IR
        "mcu_after_android_program_floor": round(
            program_seconds(row["mcu_after_android"]) / row["mcu_cold"]["wall_s"], 3
        ),
    }
    return row


def program_seconds(build: dict) -> float:
    """Seconds a build spent getting its program (PROGRAM_STAGES): importing torch, loading or capturing."""
    return sum(seconds for name, seconds in build["stages"].items() if name in PROGRAM_STAGES)


def _median_stages(each_round: list[dict]) -> dict:
    """Each stage's median seconds over the rounds (a stage a round did not run counts 0)."""
    names = dict.fromkeys(name for stages in each_round for name in stages)
    return {name: round(statistics.median(stages.get(name, 0.0) for stages in each_round), 3) for name in names}


def where_the_time_went(row: dict, kind: str = "mcu_after_android", top: int = 4) -> str:
    """One line: the build's largest stages, and the rest of its wall time (process start, imports
    outside any stage, exit)."""
    build = row[kind]
    stages = sorted(build["stages"].items(), key=lambda item: -item[1])
    rest = build["wall_s"] - sum(build["stages"].values())
    parts = [f"{name} {seconds:.2f}" for name, seconds in stages[:top]]
    parts.append(f"{len(stages) - top} other stages {sum(s for _, s in stages[top:]):.2f}" if len(stages) > top else "")
    parts.append(f"outside any stage {rest:.2f}")
    return f"{row['model']} {kind.replace('_', ' ')} {build['wall_s']:.2f} s: " + ", ".join(p for p in parts if p)


def _same_files(a: Path, b: Path) -> bool:
    files = sorted(os.listdir(a))
    return files == sorted(os.listdir(b)) and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def format_table(rows: list[dict]) -> str:
    head = (
        f"{'model':<20}{'android cold':>13}{'cached':>8}{'ratio':>7}  {'mcu cold':>9}{'after android':>14}"
        f"{'ratio':>7}{'floor':>7}{'cached':>8}{'ratio':>7}  {'float shared':>12}  identical"
    )
    lines = [head]
    for r in rows:
        q = r["ratios"]
        lines.append(
            f"{r['model']:<20}{r['android_cold']['wall_s']:>12.2f}s{r['android_cached']['wall_s']:>7.2f}s"
            f"{q['android_cached_rebuild']:>7.2f}  {r['mcu_cold']['wall_s']:>8.2f}s{r['mcu_after_android']['wall_s']:>13.2f}s"
            f"{q['mcu_after_android']:>7.2f}{q['mcu_after_android_program_floor']:>7.2f}"
            f"{r['mcu_cached']['wall_s']:>7.2f}s{q['mcu_cached_rebuild']:>7.2f}"
            f"  {'yes' if r['float_model_shared'] else 'no':>12}  {r['byte_identical']}"
        )
    return "\n".join(lines)


def summarize(rows: list[dict]) -> dict:
    if not rows:
        raise SystemExit("no model built: nothing to summarize (each failure is printed above)")

    def median(key: str) -> float:
        return round(statistics.median(r["ratios"][key] for r in rows), 3)

    cached = median("android_cached_rebuild"), median("mcu_cached_rebuild")
    shared = [r["ratios"]["mcu_after_android"] for r in rows if r["float_model_shared"]]
    return {
        "median_android_cached_rebuild_over_cold": cached[0],
        "median_mcu_cached_rebuild_over_cold": cached[1],
        "median_mcu_after_android_over_mcu_cold": median("mcu_after_android"),
        "median_program_floor_of_that_ratio": median("mcu_after_android_program_floor"),
        "float_model_shared": f"{len(shared)}/{len(rows)}",
        "median_mcu_after_android_over_mcu_cold_where_shared": round(statistics.median(shared), 3) if shared else None,
        "goals": GOALS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=None, help=f"subset of {', '.join(MODELS)}")
    parser.add_argument("--spec", action="append", default=[], metavar="NAME=MODEL", help="also bench this MODEL spec")
    parser.add_argument("--zoo", default="", help="also bench these zoo models (comma separated names)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of the five builds per model; each wall time is the median over them (noisy machines)",
    )
    parser.add_argument(
        "--pt2",
        action="store_true",
        help="build the zoo models from a .pt2 each (captured once, as `tpuedge export` saves it): "
        "the workflow whose rebuilds the cache replays whole",
    )
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    compile_checkout(ROOT)  # tpuedge timed with its bytecode, as installed (bench/checkout_bytecode.py)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tpuedge-bench-cache-") as tmp:
        work = Path(tmp)
        specs = {m: f"{ROOT}/examples/models.py:{m}" for m in MODELS if m != "digits"}
        extra = dict(item.split("=", 1) for item in args.spec)
        specs.update(extra)
        zoo = {name: f"{ROOT}/bench/zoo_specs.py:{name}" for name in filter(None, args.zoo.split(","))}
        wanted = [*(MODELS if args.models is None else args.models), *extra, *zoo]
        for name in wanted:
            if name == "digits":
                spec, cal = _export_digits(work)
            elif name in zoo:
                spec = zoo[name]
                cal = zoo_calibration(name, spec, work)
                if args.pt2:
                    spec = _saved_program(spec, work / f"{name}.pt2")
            elif name in specs:
                spec = specs[name]
                cal = _calibration_for(spec, work)
            else:
                raise SystemExit(f"unknown model {name!r}; choose from {', '.join([*MODELS, *specs])}")
            try:
                row = bench_model(name, spec, cal, work, args.repeat)
            except BuildFailed as exc:  # report it and go on with the other models
                print(f"{name}: {exc}", file=sys.stderr)
                continue
            rows.append(row)
            print(format_table([row]).splitlines()[-1], flush=True)
    summary = summarize(rows)
    print()
    print(format_table(rows))
    print("where the mcu builds after android spent their time (seconds, medians over the rounds):")
    for row in rows:
        print("  " + where_the_time_went(row))
    print(
        f"median over {len(rows)} model(s): cached rebuild / cold = {summary['median_android_cached_rebuild_over_cold']} "
        f"(android), {summary['median_mcu_cached_rebuild_over_cold']} (mcu) [goal <= {GOALS['cached_rebuild']}]; "
        f"mcu after android / mcu cold = {summary['median_mcu_after_android_over_mcu_cold']} [goal <= {GOALS['mcu_after_android']}; "
        f"of it, getting the program (importing torch, loading the IR): {summary['median_program_floor_of_that_ratio']}]; "
        f"the float model shared by {summary['float_model_shared']} (median ratio where shared: "
        f"{summary['median_mcu_after_android_over_mcu_cold_where_shared']})"
    )
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    path = results / "cache.json"
    path.write_text(json.dumps({"rows": rows, "summary": summary, "python": sys.version.split()[0]}, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
