"""TFLite-Micro's builtin op set as data (edge/mcu/data/tflm_ops.json), loaded once.

`tflm_ops()`: builtin name -> {"resolver": "AddConv2D", "int8": bool?}; `tflm_missing()`:
builtins TFLM has no kernel for -> why/what to try; `aten_to_tflm()`: captured ATen op key ->
the builtins litert-torch lowers it to; `quantizer_int8()`: builtins ai-edge-quantizer's static
int8 recipe quantizes. `mcu_int8_problem(builtin)` joins them into the one rule both
`tpuedge check --target mcu` and the mcu build apply (mcu is always strict int8).
tests/test_tflm_ops.py checks the data against the real `tflite_micro` interpreter, and
tests/test_mcu_op_truth.py checks every ATen entry against a real mcu conversion.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

__all__ = [
    "tflm_data",
    "tflm_ops",
    "tflm_missing",
    "aten_to_tflm",
    "quantizer_int8",
    "mcu_int8_problem",
    "DATA_PATH",
]

DATA_PATH = Path(__file__).with_name("data") / "tflm_ops.json"
# Inserted by the quantizer itself to re-scale int8 tensors, never lowered from an ATen op.
_QUANTIZER_OWN = frozenset({"QUANTIZE"})
# What the mcu build's edge/mcu/tflm_forms.py does to the converted model before TFLM sees it:
# EMBEDDING_LOOKUP, left in float by the quantizer, gets an int8 table; ARG_MAX, ARG_MIN and
# the order comparisons, left in float too, read the int8 tensors their DEQUANTIZEs read (a
# constant in int8); SELECT becomes SELECT_V2, whose rule it then follows.
_FOLDED_TO_INT8 = frozenset(
    {"EMBEDDING_LOOKUP", "ARG_MAX", "ARG_MIN", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"}
)
_REPLACED = {"SELECT": "SELECT_V2"}


@lru_cache(maxsize=1)
def tflm_data() -> dict:
    return json.loads(DATA_PATH.read_text())


def tflm_ops() -> dict[str, dict]:
    return tflm_data()["ops"]


def tflm_missing() -> dict[str, str]:
    return tflm_data()["missing"]


def aten_to_tflm() -> dict[str, list[str]]:
    return tflm_data()["aten"]


def quantizer_int8() -> frozenset[str]:
    return frozenset(tflm_data()["quantizer_int8"]) | _QUANTIZER_OWN


def mcu_int8_problem(builtin: str) -> str | None:
    """Why `builtin` can't run in a strict-int8 TFLite-Micro model, or None when it can."""
    if builtin in _REPLACED:
        return mcu_int8_problem(_REPLACED[builtin])
    entry = tflm_ops().get(builtin)
    if entry is None:
        return tflm_missing().get(builtin) or f"TFLite-Micro has no {builtin} kernel"
    if entry.get("non_float"):  # bool/int data: quantization leaves it alone, the kernel is enough
        return None
    if not entry.get("int8"):
        return f"TFLite-Micro's {builtin} kernel takes no int8 tensors"
    if builtin not in quantizer_int8() | _FOLDED_TO_INT8:
        return f"ai-edge-quantizer leaves {builtin} in float (no int8 recipe for it), and TFLite-Micro runs only integer graphs"
    return None
