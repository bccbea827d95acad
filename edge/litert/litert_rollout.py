"""A rollout budget's runs in LiteRT (quantize/rollout.py says what a rollout is).

runner, reference, outputs = litert_rollout(program, tflite, samples, channels_last, rollout)
"""

from __future__ import annotations

__all__ = ["litert_rollout"]


def litert_rollout(program, tflite: bytes, samples, channels_last: bool, rollout) -> tuple:
    """(runner, float outputs, LiteRT outputs) of every step of each sequence, each model fed its own state."""
    from tpuedge.edge.litert.float_model import tflite_layout_inputs
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.quantize.rollout import rollout_or_samples

    runner = LiteRTRunner(tflite)
    outputs = rollout_or_samples(lambda *s: runner.run(tflite_layout_inputs(list(s), channels_last)), samples, rollout)
    return runner, rollout_or_samples(program.run, samples, rollout), outputs
