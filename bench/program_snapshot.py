"""Benchmark: a .pt2 read through torch.export's loader against its cached snapshot, per zoo model.

Each zoo model is captured and saved as a .pt2 (what `tpuedge export` writes), then loaded twice in
fresh processes sharing one build cache: the first load reads the .pt2 (torch.export.load) and
stores its snapshot (shared_ir/program_snapshot.py), the second reads the snapshot. Per load: wall
time (the process's own, imports included), whether torch._dynamo was imported, and what the
program gives that the builds read: its fingerprint, both LiteRT float models' keys (android's
program and mcu's after its passes: the float model an mcu build after android shares), and the
outputs on two generated samples (sha256 of their bytes). A model whose program the snapshot
cannot hold is listed as such (it loads the usual way every time).

    python bench/program_snapshot.py                      # every zoo model
    python bench/program_snapshot.py --models kws_dscnn,mtcnn_onet
Writes bench/results/program_snapshot.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # the checkout's tpuedge wins over an installed copy

# run in each child: load, then what builds read from the program
_CHILD = r"""
import hashlib, json, sys, time
started = time.perf_counter()
from tpuedge.shared_ir.cache_keys import build_session
from tpuedge.shared_ir.program import Program
with build_session() as session:
    program = Program.load(sys.argv[1])
    fingerprint = program.fingerprint
loaded = time.perf_counter() - started
dynamo_after_load = "torch._dynamo" in sys.modules
from tpuedge.edge.litert.litert_lowering import lowered_fingerprint
from tpuedge.edge.mcu.mcu_capability import mcu_passes
rewritten, results = mcu_passes().run(program.exported_program)
mcu = program if not any(r.changed for r in results) else Program(rewritten, name=program.name)
outputs = hashlib.sha256()
for sample in program.example_inputs(count=2):
    for out in program.run(*sample):
        outputs.update(out.tobytes())
print(json.dumps({"load_s": round(loaded, 3), "outcome": [r.outcome for r in session.stages if r.stage == "program"],
                  "dynamo_after_load": dynamo_after_load, "dynamo_at_end": "torch._dynamo" in sys.modules,
                  "fingerprint": fingerprint, "android_lowered": lowered_fingerprint(program),
                  "mcu_lowered": lowered_fingerprint(mcu), "outputs": outputs.hexdigest()}))
"""


def _load_in_child(pt2: Path, cache: Path) -> dict:
    env = {**os.environ, "TPUEDGE_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("TPUEDGE_NO_CACHE", None)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(pt2)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(name: str, folder: Path) -> dict:
    import tpuedge
    from zoo_models import ZOO

    module, example = ZOO[name].build()
    pt2 = tpuedge.export(module, example, name=name).save(folder / f"{name}.pt2")
    cache = folder / f"{name}-cache"
    first, second = _load_in_child(pt2, cache), _load_in_child(pt2, cache)
    same = {key: first[key] == second[key] for key in ("fingerprint", "android_lowered", "mcu_lowered", "outputs")}
    return {
        "model": name,
        "snapshot": second["outcome"] == ["hit"],
        "pt2_bytes": pt2.stat().st_size,
        "torch_export_load": first,
        "snapshot_load": second,
        "same": same,
    }


def main() -> None:
    from zoo_models import selected_models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="", help="comma separated zoo models (default: all)")
    names = selected_models(parser.parse_args().models)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    rows = []
    print(
        f"{'model':<24}{'snapshot':>9}{'loader s':>10}{'snapshot s':>11}{'ratio':>7}  dynamo (loader, snapshot)  all equal"
    )
    with tempfile.TemporaryDirectory(prefix="tpuedge-bench-snapshot-") as tmp:
        for name in names:
            row = measure(name, Path(tmp))
            rows.append(row)
            a, b = row["torch_export_load"], row["snapshot_load"]
            print(
                f"{name:<24}{'yes' if row['snapshot'] else 'no':>9}{a['load_s']:>10.2f}{b['load_s']:>11.2f}"
                f"{b['load_s'] / a['load_s']:>7.2f}  {a['dynamo_at_end']!s:>6}, {b['dynamo_at_end']!s:<6}"
                f"{'':>13}{all(row['same'].values())}",
                flush=True,
            )
    held = [r for r in rows if r["snapshot"]]
    summary = {
        "models": len(rows),
        "snapshot_held": len(held),
        "all_equal": all(all(r["same"].values()) for r in rows),
        "median_snapshot_over_loader": round(
            statistics.median(r["snapshot_load"]["load_s"] / r["torch_export_load"]["load_s"] for r in held), 3
        )
        if held
        else None,
        "snapshot_loads_without_dynamo": sum(not r["snapshot_load"]["dynamo_at_end"] for r in held),
    }
    print(
        f"snapshot held by {summary['snapshot_held']}/{summary['models']}; fingerprint, float model keys and outputs "
        f"equal for all: {summary['all_equal']}; median load time snapshot / loader: "
        f"{summary['median_snapshot_over_loader']}; snapshot loads (with the mcu passes, the float keys and two runs) "
        f"that imported no torch._dynamo: {summary['snapshot_loads_without_dynamo']}/{len(held)}"
    )
    results = HERE / "results"
    results.mkdir(parents=True, exist_ok=True)
    path = results / "program_snapshot.json"
    path.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
