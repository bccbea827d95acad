"""Benchmark: which zoo models' mcu builds can read the float model an android build cached.

The float .tflite is cached under the fingerprint of the program litert-torch is given
(`litert_lowering.lowered_fingerprint`): android's LiteRT IR passes on the captured program, or,
for mcu, those after mcu's own passes. The two share one float model where they reach one
program. Per model: shared or not, and mcu's passes that changed the program (an unrolled LSTM,
GELU's sigmoid form: what makes mcu's float model another one). No conversion runs: the passes
and fingerprints only, so this takes a few seconds a model.

    python bench/float_sharing.py                       # every zoo model
    python bench/float_sharing.py --models tv_resnet18,kws_dscnn
Writes bench/results/float_sharing.json, with each program's fingerprint (android's as litert-torch
gets it; mcu's after its own passes and as litert-torch gets it): a change to either target's
passes that leaves them equal changed no program.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # the checkout's tpuedge wins over an installed copy


def sharing(name: str) -> dict:
    import tpuedge
    from tpuedge.edge.litert.litert_lowering import lowered_fingerprint
    from tpuedge.edge.mcu.mcu_capability import mcu_passes
    from tpuedge.shared_ir.program import Program
    from zoo_models import ZOO

    module, example = ZOO[name].build()
    program = tpuedge.export(module, example, name=name)
    # passes never change their input, and one that leaves a program unchanged returns that same
    # program, which litert_ir_passes has already passed for android: one capture serves both
    rewritten, results = mcu_passes().run(program.exported_program)
    mcu_program = Program(rewritten, name=name)
    android, mcu = lowered_fingerprint(program), lowered_fingerprint(mcu_program)
    # the fingerprints too, so that a change to either target's passes shows which programs moved
    return {
        "model": name,
        "shared": android == mcu,
        "mcu_passes_that_changed_it": [r.name for r in results if r.changed],
        "fingerprints": {"android_lowered": android, "mcu_rewritten": mcu_program.fingerprint, "mcu_lowered": mcu},
    }


def main() -> None:
    from zoo_models import selected_models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="", help="comma separated zoo models (default: all)")
    names = selected_models(parser.parse_args().models)
    rows = []
    print(f"{'model':<28}{'shared':>7}  mcu passes that changed the program")
    for name in names:
        row = sharing(name)
        rows.append(row)
        print(
            f"{name:<28}{'yes' if row['shared'] else 'no':>7}  {', '.join(row['mcu_passes_that_changed_it']) or '-'}",
            flush=True,
        )
    print(f"float model shared by android and mcu: {sum(r['shared'] for r in rows)}/{len(rows)}")
    results = HERE / "results"
    results.mkdir(parents=True, exist_ok=True)
    path = results / "float_sharing.json"
    path.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
