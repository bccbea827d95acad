"""Benchmark: tpuedge's android backend vs `litert_torch.convert` straight from the module.

For each model and recipe, both sides convert in a child process (wall time of the conversion
call, peak RSS of the child); then, here, both .tflite files run in the LiteRT interpreter
(1 thread, median of N runs) and are scored against the float model on held-out inputs.

  tpuedge: Program (torch.export IR) -> litert-torch pipeline from the ExportedProgram ->
           ai-edge-quantizer recipe (int8: global min/max calibration + per-op search)
  peer:    litert_torch.convert(module, args) -> the same ai-edge-quantizer recipe with its
           default calibration (int8: float I/O like ours)

    python bench/edge_vs_peer.py            # prints a table, writes bench/results/edge_vs_peer.json
    python bench/edge_vs_peer.py --models build_cnn --schemes int8 --repeat 3   # a subset

The machine is shared and noisy: `--repeat N` runs each side's child N times, alternating
tpuedge and peer, and reports the median (all runs in the JSON); latency is measured in
alternating blocks of both files for the same reason.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkout_bytecode import compile_checkout  # noqa: E402
from peak_rss import own_peak_rss_mb  # noqa: E402
from peer import peer_convert  # noqa: E402

from tpuedge.edge.android.litert_latency import median_latency_ms  # noqa: E402


MODELS = ("build_cnn", "build_depthwise", "build_transformer", "digits")
SCHEMES = ("none", "dynamic-int8", "int8")
CALIBRATION = 64
TEST = 32


def _setup_paths() -> None:
    for p in (ROOT / "examples", ROOT / "examples" / "digits"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))


def make_model(name: str, digits_weights: str | None):
    import torch

    _setup_paths()
    if name == "digits":
        import model as digits

        net = digits.DigitsCNN()
        net.load_state_dict(torch.load(digits_weights))
        return net.eval(), (torch.zeros(1, 1, 8, 8),)
    import models

    return getattr(models, name)()


def make_inputs(name: str, module, args, seed: int, count: int) -> list[list[np.ndarray]]:
    """Inputs from one distribution for calibration and test (images: per-image brightness and
    contrast, see tests/test_android.py; digits: the real train/test split)."""
    _setup_paths()
    if name == "digits":
        import model as digits

        x_train, _, x_test, _ = digits.digits_split()
        data = x_train if seed == 1 else x_test
        return [[data[i : i + 1]] for i in range(min(count, len(data)))]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        sample = []
        for a in args:
            x = rng.standard_normal(tuple(a.shape))
            if x.ndim == 4:
                c = x.shape[1]
                x = x * rng.uniform(0.5, 1.5, (1, c, 1, 1)) + rng.normal(0, 1, (1, c, 1, 1))
            sample.append(x.astype(np.float32))
        out.append(sample)
    return out


def child(name: str, scheme: str, side: str, out_path: str, digits_weights: str | None) -> None:
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    module, args = make_model(name, digits_weights)
    calibration = make_inputs(name, module, args, 1, CALIBRATION)
    # Both sides import the same heavy libraries outside the timed region: the clock measures
    # export + lowering + quantization, not Python imports.
    import ai_edge_quantizer.calibrator  # noqa: F401
    import ai_edge_quantizer.quantizer  # noqa: F401
    import ai_edge_litert.interpreter  # noqa: F401
    import litert_torch  # noqa: F401
    import litert_torch._convert.core  # noqa: F401

    import tpuedge
    from tpuedge.edge.litert.convert import program_to_tflite
    from tpuedge.quantize import QuantConfig

    start = time.perf_counter()
    if side == "tpuedge":
        program = tpuedge.export(module, args, name=name)
        data = program_to_tflite(program, QuantConfig(scheme=scheme), calibration).tflite
    else:
        data = peer_convert(module, args, scheme, calibration)
    seconds = time.perf_counter() - start
    Path(out_path).write_bytes(data)
    rss_mb = own_peak_rss_mb()  # since this child's exec (getrusage's counts the parent's too)
    print(json.dumps({"seconds": seconds, "rss_mb": rss_mb}))


def accuracy(name: str, data: bytes, module, args) -> dict:
    import torch

    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.quantize.metrics import compare_outputs, stack_samples, task_accuracy

    runner = LiteRTRunner(data, num_threads=1)
    test = make_inputs(name, module, args, 2, TEST if name != "digits" else 10_000)
    with torch.no_grad():
        ref = [[module(*[torch.from_numpy(x) for x in s]).numpy()] for s in test]
    got = [runner.run(s) for s in test]
    summary = compare_outputs(ref, got)
    result = {
        "centered_cosine": round(summary.centered_cosine, 5),
        "max_abs_error": float(f"{summary.max_abs_error:.3g}"),
    }
    if name == "digits":
        _setup_paths()
        import model as digits

        labels = digits.digits_split()[3]
        result["test_accuracy"] = round(task_accuracy(stack_samples([g[0] for g in got]), labels), 4)
        result["float_accuracy"] = round(task_accuracy(stack_samples([r[0] for r in ref]), labels), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "SCHEME", "SIDE", "OUT"))
    parser.add_argument("--digits-weights")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument(
        "--latency-seconds", type=float, default=6.0, help="time spent measuring latency per model pair"
    )
    parser.add_argument("--repeat", type=int, default=1, help="conversions per side (median; alternating sides)")
    opts = parser.parse_args()
    if opts.child:
        child(*opts.child, digits_weights=opts.digits_weights)
        return
    compile_checkout(ROOT)  # tpuedge timed with its bytecode, as installed (bench/checkout_bytecode.py)

    import torch

    torch.set_num_threads(1)  # torch eager here only makes references; 2 threads is slower on 2 cores
    _setup_paths()
    tmp = Path(tempfile.mkdtemp(prefix="edge_vs_peer."))
    weights = tmp / "digits.pt"
    import model as digits

    torch.save(digits.train_digits_cnn().state_dict(), weights)
    rows = []
    sides = ("tpuedge", "peer")
    for name in opts.models.split(","):
        module, args = make_model(name, str(weights))
        first = make_inputs(name, module, args, 2, 1)[0]
        for scheme in opts.schemes.split(","):
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            errors: dict[str, str] = {}
            for _ in range(opts.repeat):
                for side in sides:  # alternating, so load changes hit both sides
                    if side in errors:
                        continue
                    out = tmp / f"{name}.{scheme}.{side}.tflite"
                    cmd = [
                        sys.executable,
                        __file__,
                        "--child",
                        name,
                        scheme,
                        side,
                        str(out),
                        "--digits-weights",
                        str(weights),
                    ]
                    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                    if proc.returncode != 0:
                        errors[side] = proc.stderr.strip().splitlines()[-1]
                        print(f"{name} {scheme} {side}: FAILED {errors[side]}", flush=True)
                        continue
                    runs[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            files = {
                side: (tmp / f"{name}.{scheme}.{side}.tflite").read_bytes() for side in sides if side not in errors
            }
            latency = median_latency_ms(files, first, opts.latency_seconds)
            for side in sides:
                if side in errors:
                    rows.append({"model": name, "scheme": scheme, "side": side, "error": errors[side]})
                    continue
                seconds = [r["seconds"] for r in runs[side]]
                row = {
                    "model": name,
                    "scheme": scheme,
                    "side": side,
                    "convert_s": round(statistics.median(seconds), 2),
                    "convert_s_runs": [round(x, 2) for x in seconds],
                    "peak_rss_mb": round(statistics.median(r["rss_mb"] for r in runs[side])),
                    "bytes": len(files[side]),
                    "latency_ms": round(latency[side], 4),
                    **accuracy(name, files[side], module, args),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    path = results / "edge_vs_peer.json"
    path.write_text(json.dumps({"runs": opts.runs, "repeat": opts.repeat, "threads": 1, "rows": rows}, indent=2) + "\n")
    print()
    print(format_table(rows))
    print(f"\nwrote {path}")


def format_table(rows: list[dict]) -> str:
    cols = [
        "model",
        "scheme",
        "side",
        "convert_s",
        "peak_rss_mb",
        "bytes",
        "latency_ms",
        "centered_cosine",
        "max_abs_error",
        "test_accuracy",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append(
            "| " + " | ".join(str(r.get(c, r.get("error", "") if c == "convert_s" else "")) for c in cols) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
