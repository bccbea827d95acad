"""One android conversion: program_to_tflite plus android's own IR rewrite for static int8.

Used by a plain `--quantize SCHEME` build and by each of `--quantize auto`'s candidates, so the
two convert alike.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["convert_for_android", "with_int8_tables"]


def convert_for_android(program: "Program", config, calibration, **options: Any):
    """program_to_tflite, with android's own IR rewrite for static int8: embedding tables as
    gathers, stored in int8 (`with_int8_tables`); the recipe lists it."""
    from tpuedge.edge.convert import program_to_tflite

    rewrites: list[dict] = []
    if config.scheme == "int8":
        program, rewrites = with_int8_tables(program)
    converted = program_to_tflite(program, config, calibration, target="android", **options)
    if not rewrites:
        return converted
    return dataclasses.replace(converted, recipe={**converted.recipe, "ir_rewrites": rewrites})


def with_int8_tables(program: "Program") -> tuple["Program", list[dict]]:
    """`program` with its embedding tables as gathers, which LiteRT's static int8 recipe stores
    in int8 (shared_ir/passes/embedding_gather.py); same numbers, its own float model. Android's
    static int8 builds use it; TFLite-Micro's int8 GATHER_ND over token ids does not run, so mcu
    keeps the lookup (and refuses it in its check). Returns (program, the pass results)."""
    from tpuedge.shared_ir.passes.embedding_gather import EmbeddingAsGather
    from tpuedge.shared_ir.program import Program

    ep, result = EmbeddingAsGather()(program.exported_program)
    if not result.changed:
        return program, []
    return Program(ep, name=program.name), [result.to_json()]
