"""The arena probe names what fails whatever the arena (edge/mcu/arena.py): a kernel whose Prepare
ran out of a small arena is not the op the model can't run."""

from __future__ import annotations

import numpy as np
import pytest

from tpuedge.edge.mcu import arena
from tpuedge.edge.mcu.tflm_runtime import TflmError

# what TFLite-Micro printed for the unrolled 400-frame beat tracker (tests/test_mcu_long_sequences.py's
# pattern): 1,200 FULLY_CONNECTEDs with per-channel tables ran out of a 2 MB arena in Prepare, and its
# 400-input CONCATENATION failed with any arena
_FC_OUT_OF_ARENA = (
    "tensorflow/lite/micro/kernels/kernel_util.cc:516 false was not true.\n"
    "Node FULLY_CONNECTED (number 1024) failed to prepare with status 1\n"
)
_WIDE_CONCATENATION = (
    "tensorflow/lite/micro/kernels/concatenation.cc:156 num_inputs <= kMaxInputNum was not true.\n"
    "Node CONCATENATION (number 13595) failed to prepare with status 1\n"
)


def _tflm(monkeypatch, at_ceiling: str | None):
    def run(tflite, size, sample, allocated=None, checked=False):
        if size < arena._CEILING:
            return TflmError("TFLM failed to allocate tensors", _FC_OUT_OF_ARENA)
        return None if at_ceiling is None else TflmError("TFLM failed to allocate tensors", at_ceiling)

    monkeypatch.setattr(arena, "_run", run)


def test_the_op_that_fails_with_any_arena_is_named_not_the_one_that_ran_out(monkeypatch):
    _tflm(monkeypatch, _WIDE_CONCATENATION)
    with pytest.raises(Exception) as raised:
        arena.arena_fits(b"", 2_000_000, [np.zeros(1, np.int8)])
    said = str(raised.value)
    assert "CONCATENATION" in said and "at most 10 inputs" in said and "FULLY_CONNECTED" not in said


def test_a_kernel_that_runs_with_a_larger_arena_means_the_arena_was_too_small(monkeypatch):
    _tflm(monkeypatch, None)
    assert arena.arena_fits(b"", 2_000_000, [np.zeros(1, np.int8)]) is False
