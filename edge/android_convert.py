"""One android conversion: program_to_tflite plus android's own IR rewrite for static int8.

Used by a plain `--quantize SCHEME` build and by each of `--quantize auto`'s candidates, so the
two convert alike.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["convert_for_android"]


def convert_for_android(program: "Program", config, calibration, **options: Any):
    """program_to_tflite, with android's own IR rewrite for static int8: embedding tables as
    gathers, stored in int8 (edge/convert.py:with_int8_tables); the recipe lists it."""
    from tpuedge.edge.convert import program_to_tflite, with_int8_tables

    rewrites: list[dict] = []
    if config.scheme == "int8":
        program, rewrites = with_int8_tables(program)
    converted = program_to_tflite(program, config, calibration, target="android", **options)
    if not rewrites:
        return converted
    return dataclasses.replace(converted, recipe={**converted.recipe, "ir_rewrites": rewrites})
