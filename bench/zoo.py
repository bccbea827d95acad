"""The zoo benchmark: every zoo model on every target, tpuedge against the peer, in one run.

    python bench/zoo.py --setup                           # once: torchvision + timm, privately
    python bench/zoo.py                                   # all models, all targets (about an hour on 2 cores)
    python bench/zoo.py --models mtcnn_onet,kws_dscnn --targets android:int8,mcu
    python bench/zoo.py --peers all                       # peer builds for the big models too
    python bench/zoo.py --report a/zoo.json b/zoo.json    # one report from runs made side by side
    python bench/zoo.py --write-docs bench/results/zoo.json  # that run as docs/zoo-results.md

Targets: android:none, android:dynamic-int8, android:int8, mcu (board esp32s3, the biggest
built-in one: a budget error there means the model fits no board) and cloud-tpu.
Each build runs cold (TPUEDGE_NO_CACHE) in a fresh child process (`tpuedge.build` through the
Python API); its wall time (the whole process: imports, model, export, build) and peak RSS are
measured. For the android schemes the peer, `litert_torch.convert` (+ ai-edge-quantizer: dynamic_wi8_afp32, or
static int8 with the same calibration samples and float I/O), runs in a child the same way.
Then, in this process, both files run in LiteRT (accuracy against the torch float model on
the model's evaluation samples, latency with 1 thread in alternating blocks), mcu builds run
in TFLite-Micro, and cloud builds on XLA:CPU (forward parity against torch, relative to the
output range).

Writes bench/results/zoo.json, zoo.md and zoo.png (git ignores bench/results/).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # the checkout's tpuedge wins over an installed copy

from checkout_bytecode import compile_checkout  # noqa: E402
from peak_rss import own_peak_rss_mb  # noqa: E402
from peer import peer_convert  # noqa: E402

from tpuedge.edge.android.litert_latency import median_latency_ms  # noqa: E402


def _targets() -> tuple[str, ...]:
    """android's schemes as tpuedge offers them (fp16 aside), `auto` included once it exists."""
    from tpuedge.quantize.config import SCHEMES

    schemes = [s for s in ("none", "dynamic-int8", "int8", "auto") if s in SCHEMES]
    return (*(f"android:{s}" for s in schemes), "mcu", "cloud-tpu")


TARGETS = _targets()
MCU_BOARD = "esp32s3"
PEER_MAX_PARAMS = 6_000_000  # bigger models get peer builds only with --peers all
CALIBRATION, EVALUATION = 16, 32


# ---- child process: one build -----------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    """The error for the table: its first 240 characters; for a build below its budget, what the
    budget measured (the lines "- output 0: mean per-sample cosine 0.98 < 0.99"), which a long
    model name pushed out of those characters."""
    measured = [line.strip()[2:] for line in str(exc).splitlines() if line.strip().startswith("- output")]
    if type(exc).__name__ == "BudgetError" and measured:
        return f"BudgetError: below budget ({'; '.join(measured[:3])})"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:240]}"


def run_child(spec: dict) -> None:
    """Build one (model, target, side) and print one JSON line: seconds, rss_mb, bytes or error."""
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    import torch

    torch.set_num_threads(1)  # both sides alike; spinning OpenMP threads wreck timings on a shared machine
    from zoo_models import ZOO

    entry = ZOO[spec["model"]]
    module, example = entry.build()
    calibration = entry.samples(spec["calibration"], 1)[0]
    target, _, scheme = spec["target"].partition(":")
    out = Path(spec["out"])
    result: dict = {}
    start = time.perf_counter()
    try:
        if spec["side"] == "peer":
            data = peer_convert(module, example, scheme, calibration)
            out.write_bytes(data)
            result["bytes"] = len(data)
        else:
            import tpuedge

            program = tpuedge.export(module, example, name=spec["model"])
            options: dict = {}
            if target == "android":
                # every quantized scheme gets the data a user has: int8 and auto calibrate on it, the
                # others measure their budget on it (without it, on random inputs: a smoke check)
                options = {"quantize": scheme, "calibration": calibration if scheme != "none" else None}
            elif target == "mcu":
                options = {"calibration": calibration, "board": MCU_BOARD, "eval": "none"}
            tpuedge.build(program, target, out, **options)
            result["bytes"] = artifact_bytes(out, target)
            result["sha256"] = artifact_digests(out)
        result["seconds"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - every failure is a row of the table
        result.update(error=_first_line(exc), kind=type(exc).__name__, seconds=time.perf_counter() - start)
    result["rss_mb"] = own_peak_rss_mb()  # since this child's exec (getrusage's counts the parent's too)
    print("ZOO-RESULT " + json.dumps(result), flush=True)


def artifact_bytes(out: Path, target: str) -> int:
    if target == "cloud-tpu":  # the deployable parts: the exported program and its weights
        return sum((out / f).stat().st_size for f in ("model.jaxexport", "model.safetensors") if (out / f).is_file())
    return (out / "model.tflite").stat().st_size


def artifact_digests(out: Path) -> dict[str, str]:
    """sha256 of every file the build wrote: two runs compare artifact bytes (`--compare`)."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def spawn(spec: dict, timeout: float) -> dict:
    """Run one build child; its result plus the process's wall time."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    # Cold builds: tpuedge's build cache would turn every build after a model's first into hits
    # (and a second run of the bench into all hits). Cache ratios are another benchmark's job.
    env = {**os.environ, "TPUEDGE_NO_CACHE": "1"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "kind": "Timeout", "wall_s": timeout}
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ZOO-RESULT ")]
    if not lines:
        how = (
            f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        )
        return {
            "error": f"the build process crashed ({how})",
            "kind": "Crash",
            "wall_s": wall,
            "stderr_tail": proc.stderr[-4000:],
        }
    result = json.loads(lines[-1][len("ZOO-RESULT ") :])
    result["wall_s"] = wall
    if "error" in result:
        result["stderr_tail"] = proc.stderr[-4000:]
    return result


# ---- this process: references, evaluation, latency ----------------------------------------------


def _as_list(out) -> list[np.ndarray]:
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in out]


def float_reference(entry, count: int) -> dict:
    import torch

    from zoo_models import param_count

    module, _ = entry.build()
    samples, labels = entry.samples(count, 2)
    with torch.no_grad():
        outputs = [_as_list(module(*[torch.from_numpy(a) for a in s])) for s in samples]
    return {
        "params": param_count(module),
        "samples": samples,
        "labels": labels,
        "outputs": outputs,
        "accuracy": entry.eval_accuracy(outputs, labels),
    }


def score(entry, ref: dict, got: list[list[np.ndarray]]) -> dict:
    from tpuedge.quantize.metrics import compare_outputs

    summary = compare_outputs(ref["outputs"][: len(got)], got)
    row = {
        "cosine": round(summary.cosine, 5),
        "centered_cosine": round(summary.centered_cosine, 5),
        "max_abs_error": float(f"{summary.max_abs_error:.3g}"),
    }
    if summary.top1_agreement is not None:
        row["top1_agreement"] = round(summary.top1_agreement, 4)
    accuracy = entry.eval_accuracy(got, ref["labels"])
    if accuracy is not None:
        row["accuracy"] = round(accuracy, 4)
    return row


def run_built(out: Path, samples) -> list[list[np.ndarray]]:
    import tpuedge
    from zoo_models import run_artifact

    return run_artifact(tpuedge.load(out), samples)


def run_tflite(data: bytes, samples) -> list[list[np.ndarray]]:
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    runner = LiteRTRunner(data, num_threads=1)
    return [runner.run([np.asarray(a, np.int32) if a.dtype == np.int64 else a for a in s]) for s in samples]


def cloud_parity(ref: dict, got: list[list[np.ndarray]]) -> float:
    """max |xla - torch| / max |torch| over all outputs and samples."""
    worst = scale = 0.0
    for r_s, g_s in zip(ref["outputs"], got):
        for r, g in zip(r_s, g_s):
            r64 = np.asarray(r, np.float64)
            worst = max(worst, float(np.max(np.abs(r64 - np.asarray(g, np.float64).reshape(r64.shape)))))
            scale = max(scale, float(np.max(np.abs(r64))))
    return worst / scale if scale else worst


def bench_model(entry, targets, opts, work: Path) -> list[dict]:
    ref = float_reference(entry, opts.eval)
    with_peer = opts.peers == "all" or (opts.peers == "small" and ref["params"] <= PEER_MAX_PARAMS)
    rows = []
    for target in targets:
        row = {
            "model": entry.name,
            "target": target,
            "family": entry.family,
            "weights": entry.weights,
            "source": entry.source,
            "params": ref["params"],
            "float_accuracy": ref["accuracy"],
        }
        base = {"model": entry.name, "target": target, "calibration": opts.calibration}
        out = work / f"{entry.name}.{target.replace(':', '.')}"
        built = spawn({**base, "side": "tpuedge", "out": str(out)}, opts.timeout)
        row.update(_side("", built))
        peer = None
        if with_peer and target.startswith("android:"):
            peer_out = out.with_suffix(".peer.tflite")
            peer = spawn({**base, "side": "peer", "out": str(peer_out)}, opts.timeout)
            row.update(_side("peer_", peer))
        try:
            if "error" not in built and not opts.builds_only:
                _evaluate(entry, target, ref, out, row)
            if peer is not None and "error" not in peer:
                data = peer_out.read_bytes()
                row.update({f"peer_{k}": v for k, v in score(entry, ref, run_tflite(data, ref["samples"])).items()})
                if "error" not in built:
                    lat = median_latency_ms(
                        {"tpuedge": (out / "model.tflite").read_bytes(), "peer": data}, ref["samples"][0]
                    )
                    row["latency_ms"], row["peer_latency_ms"] = lat["tpuedge"], lat["peer"]
            elif "error" not in built and target.startswith("android:") and not opts.builds_only:
                row["latency_ms"] = median_latency_ms(
                    {"tpuedge": (out / "model.tflite").read_bytes()}, ref["samples"][0]
                )["tpuedge"]
        except Exception as exc:  # noqa: BLE001 - an evaluation failure is a result too
            row["eval_error"] = _first_line(exc)
        row["status"] = _status(built, target)
        rows.append(row)
        print(_progress(row), flush=True)
        shutil.rmtree(out, ignore_errors=True)
    return rows


def _evaluate(entry, target: str, ref: dict, out: Path, row: dict) -> None:
    samples = ref["samples"]
    if target == "mcu":  # TFLite-Micro's reference kernels are slow on a host: fewer samples
        samples = samples[: max(8, len(samples) // 4)]
    got = run_built(out, samples)
    row.update(score(entry, ref, got))
    if target == "cloud-tpu":
        row["cloud_parity"] = float(f"{cloud_parity(ref, got):.3g}")
    if target.startswith("android:"):  # what was written: auto's choice, and the int8 search's islands
        recipe = json.loads((out / "manifest.json").read_text()).get("recipe", {})
        islands = len(recipe.get("non_int8_ops") or [])
        kept = "weight tensor(s) float32" if recipe.get("scheme") == "dynamic-int8" else "group(s) int16/float"
        row["recipe"] = recipe.get("scheme", "") + (f" ({islands} {kept})" if islands else "")
        auto = {c["scheme"]: c for c in (recipe.get("auto") or {}).get("candidates", [])}
        if "int8" in auto:  # auto's int8 candidate after its search, on the budget's samples
            row["int8_candidate_cosine"] = min(auto["int8"]["sample_cosine_per_output"])
        search = (recipe.get("auto") or {}).get("int8_search") or recipe.get("search") or {}
        if search.get("all_int8_cosine") is not None:  # every op int8, the search's score on its own samples
            row["all_int8_cosine"] = search["all_int8_cosine"]
    if target == "mcu":
        manifest = json.loads((out / "manifest.json").read_text())
        row["arena_bytes"] = manifest.get("arena", {}).get("measured_bytes")
        row["eval_samples"] = len(samples)


def _side(prefix: str, result: dict) -> dict:
    keep = ("bytes", "sha256", "seconds", "wall_s", "rss_mb", "error", "kind", "stderr_tail")
    return {f"{prefix}{k}": (round(v, 2) if isinstance(v, float) else v) for k, v in result.items() if k in keep}


def _status(built: dict, target: str) -> str:
    if "error" not in built:
        return "ok"
    if target == "mcu" and "does not fit" in built["error"]:
        return "over budget"
    return "failed"


def _progress(row: dict) -> str:
    what = row.get("error", "") if row["status"] != "ok" else f"{row.get('bytes', 0):,} B, {row.get('wall_s', 0):.1f} s"
    return f"{row['model']:<28} {row['target']:<22} {row['status']:<12} {what}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--setup", action="store_true", help="install torchvision and timm into the zoo's private folder"
    )
    parser.add_argument(
        "--report",
        nargs="+",
        type=Path,
        metavar="ZOO.JSON",
        help="no builds: merge the rows of earlier runs' zoo.json files (the first file wins for a "
        "model and target it has) and write the reports to --out",
    )
    parser.add_argument(
        "--write-docs",
        nargs="*",
        type=Path,
        metavar="ZOO.JSON",
        help="no builds: keep these runs' zoo.json (merged as --report does) as docs/data/zoo.json and render "
        "docs/zoo-results.md from it; with no file, re-render the committed docs/data/zoo.json",
    )
    parser.add_argument("--models", nargs="*", help="model names (comma or space separated; default: all)")
    parser.add_argument("--targets", nargs="*", help=f"default: {','.join(TARGETS)}")
    parser.add_argument(
        "--peers",
        choices=("small", "all", "none"),
        default="small",
        help=f"peer builds: for models up to {PEER_MAX_PARAMS:,} parameters (default), all, none",
    )
    parser.add_argument(
        "--builds-only",
        action="store_true",
        help="no evaluation or latency: each build's size, time and file digests (with --peers none, "
        "the quickest way to compare two checkouts' artifact bytes)",
    )
    parser.add_argument("--calibration", type=int, default=CALIBRATION, help="calibration samples (seed 1)")
    parser.add_argument("--eval", type=int, default=EVALUATION, help="evaluation samples (seed 2)")
    parser.add_argument("--timeout", type=float, default=420, help="seconds per build child")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder for zoo.json, zoo.md, zoo.png")
    opts = parser.parse_args()
    if opts.child:
        run_child(json.loads(opts.child))
        return
    if opts.write_docs is not None:
        from zoo_docs import write_docs

        for path in write_docs(merge_runs(opts.write_docs) if opts.write_docs else None):
            print(f"wrote {path}")
        return
    compile_checkout(ROOT)  # tpuedge timed with its bytecode, as installed (bench/checkout_bytecode.py)

    from zoo_models import ZOO, setup_vendor
    from zoo_report import write_reports

    if opts.setup:
        setup_vendor()
        return
    if opts.report:
        run = merge_runs(opts.report)
        paths = write_reports(run["rows"], run["meta"], opts.out)
        for path in paths:
            print(f"wrote {path}")
        return
    names = _split_args(opts.models) or list(ZOO)
    targets = _split_args(opts.targets) or list(TARGETS)
    unknown = [n for n in names if n not in ZOO] + [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(
            f"unknown model(s)/target(s): {', '.join(unknown)}; models: {', '.join(ZOO)}; targets: {', '.join(TARGETS)}"
        )
    import torch

    torch.set_num_threads(1)  # references only; the build children use the defaults
    started = time.time()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="zoo.") as tmp:
        for done, name in enumerate(names, 1):
            try:
                rows += bench_model(ZOO[name], targets, opts, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a model that will not even load is a row too
                rows.append({"model": name, "target": "*", "status": "failed", "error": _first_line(exc)})
                print(f"{name:<28} {'*':<22} failed       {rows[-1]['error']}", flush=True)
            # Reports after every model: a run stopped early still leaves its finished rows.
            meta = {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                "minutes": round((time.time() - started) / 60, 1),
                "load_average": os.getloadavg(),
                "cpus": os.cpu_count(),
                "calibration": opts.calibration,
                "eval": opts.eval,
                "mcu_board": MCU_BOARD,
                "peers": opts.peers,
                "models": names[:done],
                "zoo_size": len(ZOO),
                "targets": targets,
                "models_done": done,
                "models_requested": len(names),
                # peak RSS depends on it: a peer child that starts JAX with libtpu installed
                # loads the TPU runtime (~110 MB); tpuedge's edge builds start no JAX backend
                "jax_platforms": os.environ.get("JAX_PLATFORMS", ""),
                "libtpu_installed": importlib.util.find_spec("libtpu") is not None,
            }
            paths = write_reports(rows, meta, opts.out, quiet=done < len(names))
    for path in paths:
        print(f"wrote {path}")


def merge_runs(paths: list[Path]) -> dict:
    """One run from several zoo.json files: the first file wins for a model and target it has."""
    runs = [json.loads(p.read_text()) for p in paths]
    if len(runs) == 1:
        return runs[0]
    rows, seen = [], set()
    for run in runs:
        for row in run["rows"]:
            if (row["model"], row["target"]) not in seen:
                seen.add((row["model"], row["target"]))
                rows.append(row)
    from zoo_models import ZOO

    order = {name: i for i, name in enumerate(ZOO)}
    rows.sort(key=lambda r: order.get(r["model"], len(order)))
    meta = dict(runs[0]["meta"])
    meta.update(
        models_done=sum(r["meta"]["models_done"] for r in runs),
        models_requested=sum(r["meta"]["models_requested"] for r in runs),
        minutes=max(r["meta"]["minutes"] for r in runs),
        merged_from=[f"{r['meta']['date']} (peers: {r['meta']['peers']})" for r in runs],
    )
    return {"meta": meta, "rows": rows}


def _split_args(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v]


if __name__ == "__main__":
    main()
