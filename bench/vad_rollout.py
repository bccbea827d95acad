"""silero-vad on mcu judged as it runs: its LSTM state fed back every 32 ms step.

The build reads the speech probability at every step of each evaluation clip, each model (the
float IR, the int8 TFLite-Micro model) carrying its own state (`--rollout output_1=h,output_2=c:STEPS
--budget-outputs output_0:decision`: the share of steps on the float's side of 0.5), and this bench scores what a user reads, clip by clip: a clip is
speech when its probability crosses 0.5 at any step (silero's onset threshold; the zoo's
synthetic clips: voiced harmonic sounds are speech, noise bursts and near-silence are not; the
first steps of a clip run on a zero state, so its mean stays low even on speech). It also builds the same model under the
budget as it was (every output one step at a time: the state outputs decide) for comparison.

    python bench/vad_rollout.py --clips 30 --steps 16 --out bench/results/vad_rollout.json
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

STEP, CONTEXT = 512, 64


def clip_steps(clips: np.ndarray, steps: int) -> list[np.ndarray]:
    """Each clip's inputs, step after step: 64 samples of context and the 512-sample step."""
    return [clip[None, k * STEP : k * STEP + STEP + CONTEXT].astype(np.float32) for clip in clips for k in range(steps)]


def float_rollout(net, audio: list[np.ndarray], steps: int) -> list[tuple]:
    """(audio, h, c) of every step as the float model met it, and its probability."""
    import torch

    rows = []
    with torch.no_grad():
        for i, a in enumerate(audio):
            if i % steps == 0:
                h = c = torch.zeros(1, 128)
            prob, h2, c2 = net(torch.from_numpy(a), h, c)
            rows.append((a, h.numpy(), c.numpy(), float(prob)))
            h, c = h2, c2
    return rows


def clip_accuracy(probs: list[float], labels: np.ndarray, steps: int) -> float:
    per_clip = np.asarray(probs).reshape(len(labels), steps).max(axis=1) > 0.5
    return float(np.mean(per_clip == labels.astype(bool)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=30, help="evaluation clips (seed 2)")
    parser.add_argument("--steps", type=int, default=16, help="32 ms steps a clip")
    parser.add_argument(
        "--calibration-clips", type=int, default=8, help="calibration clips (seed 1), every step a sample"
    )
    parser.add_argument("--only-rollout", action="store_true", help="skip the build under the per-step budget")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import tpuedge
    from tpuedge.quantize.rollout import parse_rollout, rollout_runs
    from zoo_data import audio_clips
    from zoo_models import ZOO
    from zoo_nets import load_silero_vad

    net = load_silero_vad()
    module, example = ZOO["silero_vad"].build()
    program = tpuedge.export(module, example, name="silero_vad")
    samples = STEP * args.steps + CONTEXT
    cal = float_rollout(net, clip_steps(audio_clips(args.calibration_clips, samples, 1), args.steps), args.steps)
    calibration = [(a, h, c) for a, h, c, _ in cal]
    clips = audio_clips(args.clips, samples, 2)
    labels = np.asarray(
        [i % 3 == 0 for i in range(args.clips)], np.int64
    )  # audio_clips: voiced, noise, silence in turn
    evaluation = float_rollout(net, clip_steps(clips, args.steps), args.steps)
    float_acc = clip_accuracy([p for *_, p in evaluation], labels, args.steps)
    spec = f"output_1=h,output_2=c:{args.steps}"
    row = {
        "model": "silero_vad",
        "target": "mcu",
        "clips": args.clips,
        "steps": args.steps,
        "calibration_samples": len(calibration),
        "float_clip_accuracy": round(float_acc, 4),
    }
    with tempfile.TemporaryDirectory() as tmp:
        eval_file = Path(tmp) / "eval.npz"
        np.savez(
            eval_file,
            audio=np.stack([a for a, *_ in evaluation]),
            h=np.stack([h for _, h, _, _ in evaluation]),
            c=np.stack([c for _, _, c, _ in evaluation]),
        )
        builds = (
            ("per_step_every_output", {}),
            ("rollout_speech_decision", {"rollout": spec, "budget_outputs": "output_0:decision"}),
        )
        for name, options in builds[1:] if args.only_rollout else builds:
            start = time.perf_counter()
            try:
                art = tpuedge.build(
                    program,
                    "mcu",
                    Path(tmp) / name,
                    calibration=calibration,
                    eval=str(eval_file),
                    allow_below_budget=True,
                    **options,
                )
            except Exception as exc:  # noqa: BLE001 - a row of the table
                row[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                continue
            budget = art.manifest["accuracy_budget"]
            steps_out = rollout_runs(
                parse_rollout(spec, program),
                [
                    tuple(s)
                    for s in zip(
                        [a for a, *_ in evaluation], [h for _, h, _, _ in evaluation], [c for _, _, c, _ in evaluation]
                    )
                ],
                lambda s: art.run(*s),
            )
            acc = clip_accuracy([float(np.asarray(o[0]).reshape(-1)[0]) for o in steps_out], labels, args.steps)
            row[name] = {
                "met": budget["met"],
                "failures": budget["failures"],
                "inputs": budget["inputs"],
                "sample_cosine_per_output": budget["measured"]["sample_cosine_per_output"],
                "clip_accuracy_in_rollout": round(acc, 4),
                "drop_points": round(100 * (float_acc - acc), 2),
                "seconds": round(time.perf_counter() - start, 1),
                "bytes": (Path(tmp) / name / "model.tflite").stat().st_size,
            }
    print(json.dumps(row, indent=1))
    if args.out:
        args.out.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
