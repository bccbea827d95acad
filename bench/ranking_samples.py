"""How many samples the int8 sensitivity ranking needs: for each zoo model, the IR ranking
(quantize/sensitivity.py: one fake-int8 run per quantization point) measured on 8 samples and
on fewer, its time, and how many of the top 24 and top 8 points each shares with the 8-sample one.

    python bench/ranking_samples.py [--models tv_shufflenet_v2_x0_5,minilm_l6] [--samples 8,4,2]

The program ranked is the one the int8 search ranks (edge/litert/litert_lowering.py's passes applied);
ranges from 8 of the zoo's seed-1 calibration samples, as a build with the zoo's 16 calibration
samples and 8 held out sets them. The search ranks on quantize/sensitivity.py's RANKING_SAMPLES.
Prints a table and writes bench/results/ranking_samples.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_MODELS = ("tv_shufflenet_v2_x0_5", "minilm_l6", "timm_mobilevit_xxs")
TOP = (24, 8)  # the ranked groups the search takes at most (edge/litert/sensitive_groups.py), its first prefixes


def measure(name: str, sample_counts: list[int]) -> list[dict]:
    import tpuedge
    from tpuedge.edge.litert.litert_lowering import litert_ir_passes
    from tpuedge.quantize.sensitivity import rank_quant_points
    from tpuedge.shared_ir.program import Program
    from tpuedge.shared_ir.targets import ir_evaluator
    from zoo_models import ZOO

    entry = ZOO[name]
    module, example = entry.build()
    program = tpuedge.export(module, example, name=name)
    lowered = Program(litert_ir_passes(program.exported_program), name=name)
    calibration = entry.samples(16, 1)[0][:8]
    rows, first = [], None
    for count in sample_counts:
        start = time.perf_counter()
        ranking = rank_quant_points(lowered, calibration, calibration[:count], evaluator=ir_evaluator())
        seconds = time.perf_counter() - start
        nodes = [s.node for s in ranking]
        first = first or nodes
        rows.append(
            {
                "model": name,
                "samples": count,
                "points": len(ranking),
                "seconds": round(seconds, 1),
                **{f"top{k}_shared": len(set(nodes[:k]) & set(first[:k])) for k in TOP},
            }
        )
        print(
            f"{name:<24} {count:>3} samples  {len(ranking):>4} points  {seconds:7.1f} s  "
            + "  ".join(f"top-{k} shared {rows[-1][f'top{k}_shared']}/{k}" for k in TOP),
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--samples", default="8,4,2", help="sample counts; the first is the reference ranking")
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["TPUEDGE_NO_CACHE"] = "1"
    import torch

    torch.set_num_threads(1)
    counts = [int(c) for c in args.samples.split(",")]
    rows = [row for name in filter(None, args.models.split(",")) for row in measure(name, counts)]
    out = ROOT / "bench" / "results" / "ranking_samples.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
