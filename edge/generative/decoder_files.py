"""The model file's name every edge decoder build writes (android's and mcu's)."""

from __future__ import annotations

__all__ = ["MODEL_FILE"]

MODEL_FILE = "model.tflite"
