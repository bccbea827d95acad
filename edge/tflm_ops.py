"""TFLite-Micro's builtin op set as data (edge/data/tflm_ops.json), loaded once.

`tflm_ops()`: builtin name -> {"resolver": "AddConv2D", "int8": bool?}; `tflm_missing()`:
builtins TFLM has no kernel for -> why/what to try; `aten_to_tflm()`: captured ATen op key ->
the builtins litert-torch lowers it to. tests/test_tflm_ops.py checks this against the real
`tflite_micro` interpreter with single-op models.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

__all__ = ["tflm_data", "tflm_ops", "tflm_missing", "aten_to_tflm", "DATA_PATH"]

DATA_PATH = Path(__file__).with_name("data") / "tflm_ops.json"


@lru_cache(maxsize=1)
def tflm_data() -> dict:
    return json.loads(DATA_PATH.read_text())


def tflm_ops() -> dict[str, dict]:
    return tflm_data()["ops"]


def tflm_missing() -> dict[str, str]:
    return tflm_data()["missing"]


def aten_to_tflm() -> dict[str, list[str]]:
    return tflm_data()["aten"]
