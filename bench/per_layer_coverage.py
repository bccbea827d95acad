"""How much of a transformer per-layer verify can see: for each zoo model, the share of IR nodes
with a counterpart tensor in the LiteRT flatbuffer that `tpuedge verify --per-layer` compares,
and where it says the int8 error enters.

    python bench/per_layer_coverage.py [--models minilm_l6,hf_distilbert] [--schemes none,int8]

Builds android with each scheme (int8: calibration from the zoo's seed-1 samples), verifies
per layer on 4 seed-2 samples (never the calibration's), prints a table and writes
bench/results/per_layer_coverage.json. A float build should compare exactly (SNR at the cap)
on every compared node; an int8 build shows its ranking.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

TRANSFORMERS = ("minilm_l6", "hf_distilbert", "hf_vit", "timm_deit_tiny_patch16_224", "hf_whisper_encoder")
CALIBRATION, EVALUATION = 16, 4


def measure(name: str, scheme: str, work: Path) -> dict:
    import tpuedge
    from tpuedge.shared_ir.ir_values import ir_layers
    from zoo_models import ZOO

    entry = ZOO[name]
    module, example = entry.build()
    program = tpuedge.export(module, example, name=entry.name)
    calibration = entry.samples(CALIBRATION, 1)[0] if scheme == "int8" else None
    start = time.perf_counter()
    artifact = tpuedge.build(
        program,
        "android",
        work / f"{entry.name}-{scheme}",
        quantize=scheme,
        calibration=calibration,
        allow_below_budget=True,
    )
    build_s = time.perf_counter() - start
    samples = entry.samples(EVALUATION, 2)[0]
    result = tpuedge.verify(artifact, program, samples, per_layer=True, layer_samples=EVALUATION, min_cosine=0.0)
    report = result.layers
    compared = [l for l in report.layers if not l.is_input]
    layers = ir_layers(program)
    worst = report.ranked()[:3]
    return {
        "model": entry.name,
        "weights": entry.weights,
        "scheme": scheme,
        "build_s": round(build_s, 1),
        "ir_layers": report.ir_layers,
        "counterparts": report.counterparts,
        "compared": len(compared),
        "coverage": round(len(compared) / max(report.counterparts, 1), 3),
        "min_snr_db": round(min(l.snr_db for l in compared), 1) if compared else None,
        "first_ranked": [f"{l.node} ({layers[l.node].op.split('.')[1]}, -{l.drop_db:.1f} dB)" for l in worst],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(TRANSFORMERS))
    parser.add_argument("--schemes", default="none,int8")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "per_layer_coverage.json")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            for scheme in args.schemes.split(","):
                try:
                    row = measure(name, scheme, Path(tmp))
                except Exception as exc:  # noqa: BLE001 - a failed model is a row of the table
                    row = {"model": name, "scheme": scheme, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print("| model | weights | scheme | compared / counterparts | coverage | min SNR dB | first ranked |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | | {r['scheme']} | failed: {r['error']} | | | |")
        else:
            print(
                f"| {r['model']} | {r['weights']} | {r['scheme']} | {r['compared']} / {r['counterparts']} | "
                f"{100 * r['coverage']:.0f}% | {r['min_snr_db']} | {'; '.join(r['first_ranked'])} |"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "samples": EVALUATION, "calibration": CALIBRATION}, indent=2) + "\n")


if __name__ == "__main__":
    main()
