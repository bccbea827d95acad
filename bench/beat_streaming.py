"""The zoo's beat tracker (Conv1d + 2-layer LSTM over 400 frames) on mcu as a streaming model.

Unrolled, its LSTM is 800 cells in one graph (tpuedge check --target mcu says so). Written as
one step instead, with the LSTM's state as inputs and outputs (the conv reads frames t-1..t+1,
zeros past the ends, as its padding), the host loops it over the frames, as a streaming model
runs. The step shares the tracker's weights, and its float loop equals the whole-sequence model.
This bench builds the step for mcu with `--rollout` (the budget reads every step of each clip,
each model carrying its own state), then rolls the TFLite-Micro model over held-out clips and
compares its per-frame activations with the float whole-sequence model's.

    python bench/beat_streaming.py --clips 4 --out bench/results/beat_streaming.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

FRAMES, BANDS, HIDDEN = 400, 81, 160


def spectrograms(count: int, seed: int) -> np.ndarray:
    """Log spectrograms of pulse trains (20-60 frames apart) over noise: [count, frames, bands]."""
    rng = np.random.default_rng(seed)
    t = np.arange(FRAMES)[None, :, None]
    period, phase = rng.uniform(20, 60, (count, 1, 1)), rng.uniform(0, 60, (count, 1, 1))
    pulse = np.exp(-(((t + phase) % period) ** 2) / 4.0)
    gain = rng.uniform(0.2, 1.0, (count, 1, BANDS))
    return np.log1p(5 * (pulse * gain + 0.3 * rng.random((count, FRAMES, BANDS)))).astype(np.float32)


def step_module(tracker):
    import torch
    import torch.nn.functional as F

    class BeatTrackerStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.lstm, self.head = tracker.conv, tracker.lstm, tracker.head

        def forward(self, window, h, c):  # window [1, 3, bands]; h, c [layers, 1, hidden]
            x = torch.relu(F.conv1d(window.transpose(1, 2), self.conv.weight, self.conv.bias)).transpose(1, 2)
            out, (h, c) = self.lstm(x, (h, c))
            return torch.sigmoid(self.head(out[:, 0])), h, c

    return BeatTrackerStep().eval()


def float_steps(step, spec: np.ndarray) -> list[tuple]:
    """(window, h, c) of every frame as the float step meets them, and its activation."""
    import torch

    padded = np.pad(spec, ((1, 1), (0, 0)))
    h, c, rows = torch.zeros(2, 1, HIDDEN), torch.zeros(2, 1, HIDDEN), []
    with torch.no_grad():
        for t in range(len(spec)):
            window = padded[t : t + 3][None].astype(np.float32)
            y, h2, c2 = step(torch.from_numpy(window), h, c)
            rows.append((window, h.numpy().copy(), c.numpy().copy(), float(y)))
            h, c = h2, c2
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=4, help="held-out clips (seed 2), 400 frames each")
    parser.add_argument("--calibration-clips", type=int, default=4, help="clips (seed 1) whose steps calibrate")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    import tpuedge
    from tpuedge.quantize.rollout import parse_rollout, rollout_runs
    from zoo_models import ZOO

    tracker, _ = ZOO["beat_tracker"].build()
    step = step_module(tracker)
    clips = spectrograms(args.clips, 2)
    with torch.no_grad():
        whole = np.stack([tracker(torch.from_numpy(x[None]))[0].numpy() for x in clips])
    calibration_rows = [r for x in spectrograms(args.calibration_clips, 1) for r in float_steps(step, x)]
    calibration = [r[:3] for r in calibration_rows[:: max(1, len(calibration_rows) // 128)]]
    evaluation = [r for x in clips for r in float_steps(step, x)]
    looped = np.asarray([r[3] for r in evaluation]).reshape(args.clips, FRAMES)
    w, h, c, _ = evaluation[0]
    program = tpuedge.export(step, tuple(torch.from_numpy(a) for a in (w, h, c)), name="beat_step")
    outs, ins = [o.name for o in program.outputs], [i.name for i in program.inputs]
    spec = f"{outs[1]}={ins[1]},{outs[2]}={ins[2]}:{FRAMES}"
    with tempfile.TemporaryDirectory() as tmp:
        eval_file = Path(tmp) / "eval.npz"
        np.savez(eval_file, **{n: np.stack([r[k] for r in evaluation]) for k, n in enumerate(ins)})
        start = time.perf_counter()
        art = tpuedge.build(
            program, "mcu", Path(tmp) / "mcu", calibration=calibration, eval=str(eval_file), rollout=spec
        )
        wall = time.perf_counter() - start
        rolled = rollout_runs(parse_rollout(spec, program), [r[:3] for r in evaluation], lambda s: art.run(*s))
    tflm = np.asarray([float(np.asarray(o[0]).reshape(-1)[0]) for o in rolled]).reshape(args.clips, FRAMES)
    m = art.manifest
    row = {
        "model": "beat_tracker (step)",
        "target": "mcu",
        "frames": FRAMES,
        "clips": args.clips,
        "calibration_samples": len(calibration),
        "float_step_loop_vs_whole_max_abs": float(np.abs(looped - whole).max()),
        "build_seconds": round(wall, 1),
        "flash_bytes": m["flash_bytes"],
        "arena_bytes": m["arena"]["recommended_bytes"],
        "tflm_ops": sum(o["count"] for o in m["tflm_ops"]),
        "precisions": sorted({o.get("precision") for o in m["quantization"]["recipe"].get("non_int8_ops", [])}),
        "budget_met": m["accuracy_budget"]["met"],
        "rollout_sample_cosine_per_output": m["accuracy_budget"]["measured"]["sample_cosine_per_output"],
        "tflm_vs_float_whole_max_abs": float(np.abs(tflm - whole).max()),
        "tflm_vs_float_whole_corr": [round(float(np.corrcoef(a, b)[0, 1]), 4) for a, b in zip(tflm, whole)],
        "float_activation_range": [float(whole.min()), float(whole.max())],
    }
    print(json.dumps(row, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
