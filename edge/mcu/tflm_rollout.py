"""A rollout budget's runs in TFLite-Micro (quantize/rollout.py says what a rollout is)."""

from __future__ import annotations

__all__ = ["tflm_rollout"]


def tflm_rollout(program, runtime, samples, rollout) -> tuple:
    """The mcu budget's (kind, float outputs, TFLite-Micro outputs, labels) over every step of each
    sequence: the integer model reads its own dequantized state, quantized again at its input."""
    from tpuedge.quantize.accuracy_samples import EVAL
    from tpuedge.quantize.rollout import budget_inputs, rollout_or_samples

    def tflm(*sample):
        return runtime.dequantized(runtime.tflm.run_raw(runtime.quantized(list(sample))))

    outputs = rollout_or_samples(tflm, samples, rollout)
    return budget_inputs(EVAL, rollout, len(samples)), rollout_or_samples(program.run, samples, rollout), outputs, None
