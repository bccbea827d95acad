"""A rollout budget's runs on the edge runtimes (see quantize/rollout.py for what a rollout is).

reference = rollout_or_samples(program.run, samples, rollout)    # float IR, fed its own state
runner, reference, outputs = litert_rollout(program, tflite, samples, channels_last, rollout)
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["rollout_or_samples", "litert_rollout", "tflm_rollout", "budget_inputs"]


def rollout_or_samples(run: Callable, samples, rollout) -> list:
    """`run(*sample)`'s outputs: one per sample, or every step of each rollout sequence."""
    if rollout is None:
        return [run(*s) for s in samples]
    from tpuedge.quantize.rollout import rollout_runs

    return rollout_runs(rollout, samples, lambda s: run(*s))


def litert_rollout(program, tflite: bytes, samples, channels_last: bool, rollout) -> tuple:
    """(runner, float outputs, LiteRT outputs) of every step of each sequence, each model fed its own state."""
    from tpuedge.edge.litert.float_model import tflite_layout_inputs
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    runner = LiteRTRunner(tflite)
    outputs = rollout_or_samples(lambda *s: runner.run(tflite_layout_inputs(list(s), channels_last)), samples, rollout)
    return runner, rollout_or_samples(program.run, samples, rollout), outputs


def budget_inputs(kind: str, rollout, samples: int) -> str:
    """The budget's samples in words: `kind`, and the rollout's sequences when there is one."""
    return kind if rollout is None else f"{kind}: {rollout.describe(samples)}"


def tflm_rollout(program, runtime, samples, rollout) -> tuple:
    """The mcu budget's (kind, float outputs, TFLite-Micro outputs, labels) over every step of each
    sequence: the integer model reads its own dequantized state, quantized again at its input."""
    from tpuedge.edge.accuracy_samples import EVAL

    def tflm(*sample):
        return runtime.dequantized(runtime.tflm.run_raw(runtime.quantized(list(sample))))

    outputs = rollout_or_samples(tflm, samples, rollout)
    return budget_inputs(EVAL, rollout, len(samples)), rollout_or_samples(program.run, samples, rollout), outputs, None
