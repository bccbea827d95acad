"""The int8 search's IR sensitivity ranking as a build-cache stage.

Ranking every quantization point of the IR in fake int8 (quantize/sensitivity.py) runs the
model once per point in JAX: tens of seconds for an encoder, most of a cached rebuild's CPU time
when it was recomputed. Its result depends only on the program, the calibration samples that
set the ranges and the samples the cosine is measured on, so it is cached under those (the
tool versions and tpuedge's source are in every key). The entries hold the exact floats, not
the report's rounded ones, so a hit ranks exactly as the cold build did.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

__all__ = ["STAGE", "ranked_points"]

STAGE = "point_ranking"


def _encode(ranking: list) -> bytes:
    return json.dumps([dataclasses.asdict(point) for point in ranking], sort_keys=True).encode()


def _decode(payload: bytes) -> list:
    from tpuedge.quantize.sensitivity import PointSensitivity

    return [PointSensitivity(**entry) for entry in json.loads(payload)]


def ranked_points(program: Any, calibration: list, measure_on: list, converter_program: Callable[[], Any]) -> list:
    """`rank_quant_points` of the program the converter sees (`converter_program()`: attention
    masks bounded, so the ranges are the calibrated ones), most sensitive first, in the IR
    evaluator the target registry offers; from the build cache when it holds it. Raises what the
    ranking raises (TooManyPoints, a lowering's UserError, no evaluator); nothing is cached then."""
    from tpuedge.quantize.sensitivity import rank_quant_points
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest
    from tpuedge.shared_ir.targets import ir_evaluator

    def rank() -> list:
        return rank_quant_points(converter_program(), calibration, measure_on, evaluator=ir_evaluator())

    parts = {"ir": program.fingerprint, "calibration": data_digest(calibration), "measure": data_digest(measure_on)}
    return cached_stage(STAGE, parts, rank, encode=_encode, decode=_decode)
