"""PT2E's static int8 (litert-torch's PT2EQuantizer, symmetric per-channel weights, int8
activations, float I/O) on a zoo model, the peer a pretrained classifier's `--quantize int8` is
compared with: top-1 agreement and mean per-sample cosine against the float module, in LiteRT,
on evaluation samples calibration never saw (calibration seed 1, evaluation seed 2, as zoo.py).

    python bench/pt2e_int8.py --model efficientnet_lite0 --calibration 16 --eval 110
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def pt2e_int8(module, example, calibration) -> bytes:
    import litert_torch
    import torch
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    captured = torch.export.export(module.eval(), example).module()
    prepared = prepare_pt2e(captured, quantizer)
    with torch.no_grad():
        for sample in calibration:
            prepared(*[torch.from_numpy(a) for a in sample])
    converted = convert_pt2e(prepared, fold_quantize=False)
    edge = litert_torch.convert(converted, example, quant_config=QuantConfig(pt2e_quantizer=quantizer))
    return bytes(edge.model_content())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--calibration", type=int, default=16)
    parser.add_argument("--eval", type=int, default=110)
    parser.add_argument("--out", type=Path, help="write the numbers here as JSON")
    args = parser.parse_args()

    import torch

    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.quantize.metrics import mean_sample_cosine, stack_samples, top1_agreement
    from zoo_models import ZOO

    entry = ZOO[args.model]
    module, example = entry.build()
    calibration = entry.samples(args.calibration, 1)[0]
    samples = entry.samples(args.eval, 2)[0]
    start = time.perf_counter()
    data = pt2e_int8(module, example, calibration)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        reference = [[module(*[torch.from_numpy(a) for a in s]).numpy()] for s in samples]
    runner = LiteRTRunner(data, num_threads=1)
    got = [runner.run(list(s)) for s in samples]
    ref, out = (
        stack_samples([r[0] for r in reference]),
        stack_samples([np.asarray(g[0]).reshape(r[0].shape) for g, r in zip(got, reference)]),
    )
    row = {
        "model": args.model,
        "peer": "PT2E static int8 (per-channel weights, float I/O)",
        "bytes": len(data),
        "seconds": round(seconds, 1),
        "calibration": args.calibration,
        "eval": args.eval,
        "top1_agreement": round(top1_agreement(ref, out), 4),
        "mean_sample_cosine": round(mean_sample_cosine(ref, out), 5),
    }
    print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
