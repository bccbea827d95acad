"""Benchmark: litert-torch's decompositions in place (edge/litert/decompose_in_place.py) against its whole
re-traces, on the zoo's models, in one process.

Per model, the float lowering (`litert_lowering.lower_to_float_flatbuffer`) both ways, each from a
fresh capture: its seconds, and how the two files compare — byte-identical, the same operators in
the same order wired to the same tensors, the tensor names that differ, and the LiteRT outputs on
one of the model's own samples (identical, or their largest difference).

    python bench/decompositions.py                                  # every zoo model
    python bench/decompositions.py --models tv_resnet18,kws_dscnn --channels-last   # mcu's layout
Writes bench/results/decompositions.json. Timings are of a warm process (a first lowering warms it
up) with one torch thread; read them as ratios within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # the checkout's tpuedge wins over an installed copy


def _inputs(entry, channels_last: bool) -> list[np.ndarray]:
    sample = entry.samples(1, 2)[0][0]
    arrays = [np.asarray(a, np.int32) if np.asarray(a).dtype == np.int64 else np.asarray(a) for a in sample]
    if channels_last:
        arrays = [
            np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 and a.dtype.kind == "f" else a for a in arrays
        ]
    return arrays


def compare(name: str, channels_last: bool) -> dict:
    import tpuedge
    from tpuedge.edge.litert import litert_lowering
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from zoo_models import ZOO

    entry = ZOO[name]
    module, example = entry.build()
    files, seconds = {}, {}
    for way in ("whole", "in place"):
        program = tpuedge.export(module, example, name=name)
        in_place = litert_lowering.decompositions_in_place
        if way == "whole":
            litert_lowering.decompositions_in_place = contextlib.nullcontext
        try:
            start = time.perf_counter()
            files[way] = litert_lowering.lower_to_float_flatbuffer(program, channels_last=channels_last)
            seconds[way] = time.perf_counter() - start
        finally:
            litert_lowering.decompositions_in_place = in_place
    whole, ours = (tflite_file.read_model(files[w]) for w in ("whole", "in place"))
    names = [tflite_file.tensor_names(files[w]) for w in ("whole", "in place")]
    renamed = sum(a != b for sub_a, sub_b in zip(*names) for a, b in zip(sub_a, sub_b))
    inputs = _inputs(entry, channels_last)
    got = [LiteRTRunner(files[w]).run(inputs) for w in ("whole", "in place")]
    largest = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(*got))
    return {
        "model": name,
        "channels_last": channels_last,
        "whole_s": round(seconds["whole"], 3),
        "in_place_s": round(seconds["in place"], 3),
        "bytes_identical": files["whole"] == files["in place"],
        "operators_identical": tflite_file.operator_wiring(whole) == tflite_file.operator_wiring(ours),
        "tensors": len(names[0][0]),
        "renamed_tensors": renamed,
        "outputs_max_difference": largest,
    }


def main() -> None:
    from zoo_models import ZOO

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo models (default: all)")
    parser.add_argument("--channels-last", action="store_true", help="NHWC inputs, as mcu builds lower")
    args = parser.parse_args()
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    import torch

    torch.set_num_threads(1)
    names = [m for m in args.models.split(",") if m]
    compare(names[0], args.channels_last)  # warms the process up: imports, first-use costs
    rows = []
    print(f"{'model':28s} {'whole s':>8s} {'in place s':>10s} {'ratio':>6s}  bytes  operators  renamed  max |diff|")
    for name in names:
        row = compare(name, args.channels_last)
        rows.append(row)
        print(
            f"{name:28s} {row['whole_s']:8.2f} {row['in_place_s']:10.2f} {row['in_place_s'] / row['whole_s']:6.2f}  "
            f"{'same' if row['bytes_identical'] else 'diff':5s}  {'same' if row['operators_identical'] else 'DIFF':9s}  "
            f"{row['renamed_tensors']:3d}/{row['tensors']:<4d} {row['outputs_max_difference']:.3g}",
            flush=True,
        )
    ratio = statistics.median(r["in_place_s"] / r["whole_s"] for r in rows)
    print(
        f"median lowering in place / whole: {ratio:.2f}; byte-identical {sum(r['bytes_identical'] for r in rows)}"
        f"/{len(rows)}; same operators {sum(r['operators_identical'] for r in rows)}/{len(rows)}; "
        f"outputs identical {sum(r['outputs_max_difference'] == 0 for r in rows)}/{len(rows)}"
    )
    out = HERE / "results" / "decompositions.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"median_ratio": ratio, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
