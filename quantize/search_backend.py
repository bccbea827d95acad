"""What the int8 precision search (quantize/precision_search.py) asks of the backend whose
candidates it measures: quantize a recipe, run the bytes, read the float model's op groups.

The search decides which groups get which precision and records why; the backend (edge/litert:
ai-edge-quantizer recipes, LiteRT or the target's runtime, the .tflite reader) answers these
questions and knows nothing of the search's ladder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.recipes import SensitiveGroup
    from tpuedge.shared_ir.program import Program

__all__ = ["CandidateRuntime", "CandidateBackend", "Equalized"]


@dataclass(frozen=True)
class CandidateRuntime:
    """A target's own judge of the int8 search's candidates, where LiteRT is not its runtime (mcu:
    TFLite-Micro, edge/mcu/tflm_candidates.py). `problem`: bytes -> why the target can't run an
    upgraded recipe, or None (the search scores a refused one as failed); `outputs`: (bytes,
    samples) -> outputs, which every candidate is scored by instead of LiteRT; `floor`: bytes ->
    None, given the all-int8 candidate before it is scored, raises where even it can't serve
    (mcu: the board's RAM). All-int8 is the least any recipe of the search needs (its upgrades
    widen activations to 16 bits), so a model that fits no board is answered after one
    conversion, not after a search: DeiT-tiny on esp32s3 searched int16 candidates in
    TFLite-Micro for over 20 minutes before the board said no."""

    target: str
    problem: "Callable[[bytes], str | None]"
    outputs: "Callable[[bytes, list], list]"
    floor: "Callable[[bytes], None] | None" = None


@dataclass(frozen=True)
class Equalized:
    """The search's answer where cross-layer equalization won: convert `program` instead."""

    program: "Program"
    report: dict


class CandidateBackend(Protocol):
    """One float model's candidates, as the search sees them. Group keys and scopes are the
    backend's own (`scopes` maps a group key to what its recipe entries name)."""

    float_model: bytes  # the float model every candidate quantizes
    quantizer: str  # the quantizer's name, for the recipe and the stage times
    runtime: str  # what the candidates run in, for the stage times
    judge: CandidateRuntime | None  # the target's own check and runtime, where LiteRT is not it

    def layout_inputs(self, sample: list) -> list:
        """A Program sample in the candidates' input layout."""

    def sensitive_groups(self) -> "tuple[list[SensitiveGroup], dict]":
        """(the float model's sensitive op groups, their scopes)."""

    def recipe(self, assignment: dict[str, str] | None = None, scopes: dict | None = None) -> list[dict]:
        """The quantizer recipe (JSON-able) giving each group of `assignment` its precision."""

    def quantize(self, entries: list[dict], ranges: str = "min-max") -> bytes:
        """The model quantized by `entries`, with activation ranges by `ranges` (after calibration)."""

    def estimate_ranges(self, methods: tuple[str, ...]) -> None:
        """Also calibrate every activation by `methods`, on the calibration samples."""

    def outputs(self, data: bytes, inputs: list) -> list | None:
        """`data` run on `inputs` (layout_inputs); None where the runtime refuses to run it."""

    def converter_program(self) -> "Program":
        """The program the converter saw (its IR passes applied): the IR rankings run on it."""

    def ranked_groups(self, ranking: list) -> "tuple[list[SensitiveGroup], dict]":
        """Groups for the ranked IR points (quantize/sensitivity.py), most sensitive first."""

    def weight_groups(self, ranking: list, elements_cap: int) -> "tuple[list[SensitiveGroup], dict]":
        """Groups for the ranked weight tensors (quantize/weight_sensitivity.py), within `elements_cap`."""

    def every_op_types(self) -> list[tuple[str, str, int]]:
        """(op type, quantizer op name, count) of each op type the upgrade can take, in graph order."""

    def every_op_group(self, types: list, excluded: frozenset[str]) -> "tuple[SensitiveGroup, Any]":
        """(the group of every op type in `types` but `excluded`, its scopes entry)."""

    def all_int8_of(self, program: "Program", calibration: list) -> bytes:
        """Another program (the same function after cross-layer equalization) converted,
        calibrated on `calibration` and quantized all int8."""
