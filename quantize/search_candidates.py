"""The int8 search's candidates: each recipe quantized once by the backend, scored against the
float IR, and remembered by its digest (quantize/precision_search.py drives them)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from tpuedge.quantize.search_score import SCREENED, recipe_key, search_score, top1_scaled
from tpuedge.shared_ir.errors import InternalError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.metrics import AccuracySummary
    from tpuedge.quantize.search_backend import CandidateBackend

__all__ = ["score_candidate", "MeasuredCandidates", "CandidateMeasurer"]


def score_candidate(tflite: bytes, eval_inputs, reference, run) -> "AccuracySummary":
    """A quantized candidate run on `eval_inputs` by `run` (the backend's `outputs`: LiteRT, or
    the target's runtime, TFLite-Micro for mcu) against `reference()`; the worst score when the
    runtime refuses to run it (an int8 kernel's own check, a DIV whose divisor rounds to its zero
    point) or its outputs are inf/NaN (a float DIV by 0): a recipe that can't ship."""
    from tpuedge.quantize.metrics import AccuracySummary, compare_outputs

    outputs = run(tflite, eval_inputs)
    if outputs is None:
        return AccuracySummary.failed_to_run(len(eval_inputs))
    if not all(np.isfinite(o).all() for sample in outputs for o in sample):
        return AccuracySummary.failed_to_run(len(eval_inputs))
    return compare_outputs(reference(), outputs)


class MeasuredCandidates:
    """The candidates one search measured, by recipe key: how to quantize each again and the
    sha256 of its bytes. Only the newest candidate's bytes stay in memory (a 22M-parameter
    encoder's ~100 candidates held 2.4 GB; the newest is the one kept more often than not); any
    other is quantized again when asked for, and must be the very model that was measured."""

    def __init__(self, quantizer: str) -> None:
        self._quantizer = quantizer
        self._again: dict[str, tuple[Callable[[], bytes], str]] = {}
        self._newest: tuple[str, bytes] | None = None

    def add(self, key: str, data: bytes, quantize_again: Callable[[], bytes], digest: str | None = None) -> None:
        self._again[key] = (quantize_again, digest or hashlib.sha256(data).hexdigest())
        self._newest = (key, data)

    def bytes_of(self, key: str, what: str) -> bytes:
        if self._newest is not None and self._newest[0] == key:
            return self._newest[1]
        quantize_again, digest = self._again[key]
        data = quantize_again()
        if hashlib.sha256(data).hexdigest() != digest:
            raise InternalError(
                f"{self._quantizer} gave different bytes for {what} the second time it quantized it; the int8 "
                "search assumes one recipe always gives one model."
            )
        return data


class CandidateMeasurer:
    """Every recipe of one static int8 search, measured once on its samples (`measure`), with
    what it scored, what the target refused and the bytes to keep. `fixed` is the assignment
    under every recipe (float from the start); `scopes` the groups' scopes, which rungs extend;
    `ranges` the activation-range method the search chose; `step` the progress row shown."""

    def __init__(
        self, program, config, calibration, backend: "CandidateBackend", fixed: dict, scopes: dict, eval_samples
    ):
        from tpuedge.shared_ir.cache_keys import data_digest

        self.config, self.backend, self.fixed, self.scopes = config, backend, fixed, scopes
        self.reference = functools.cache(
            lambda: [program.run(*s) for s in eval_samples]
        )  # not run when every candidate is cached
        self.eval_inputs = [backend.layout_inputs(s) for s in eval_samples]
        self.built = MeasuredCandidates(backend.quantizer)
        self.measured: dict = {}  # recipe key -> AccuracySummary; the search re-asks for recipes it has measured
        self.refused: dict[str, str] = {}  # recipe key -> why the target can't run it (`judge.problem`)
        # (sha256 of a candidate's bytes, samples) -> its score: different recipes can give one model (a
        # group whose ops the ranked points already made int16; 18 of MiniLM-L6's 105 candidates)
        self.scored: dict[tuple[str, int], dict] = {}
        self.parts = {
            "ir": program.fingerprint,
            "float": hashlib.sha256(backend.float_model).hexdigest(),
            "calibration": data_digest(calibration),
            "channels_last": config.channels_last,
        }
        self.step = None  # the search's progress row
        self.ranges = "min-max"  # the activation-range method, chosen by measurement
        self._floor_checked = False  # `judge.floor` is asked of the first all-int8 candidate only

    def _check_floor(self, data: bytes) -> None:
        judge = self.backend.judge
        if judge is not None and judge.floor is not None and not self._floor_checked:
            judge.floor(data)
            self._floor_checked = True

    def measure(self, assignment: dict[str, str], ranges: str | None = None, samples: int | None = None):
        """The AccuracySummary of the recipe `assignment` (on top of `fixed`), on the first
        `samples` of the search's samples (all by default)."""
        from tpuedge.quantize import search_candidates
        from tpuedge.quantize.metrics import AccuracySummary
        from tpuedge.shared_ir.cache_keys import cached_stage, decode_blob_and_json, encode_blob_and_json
        from tpuedge.shared_ir.stage_times import timed

        backend, judge, eval_inputs = self.backend, self.backend.judge, self.eval_inputs
        ranges = ranges or self.ranges
        count = min(samples or len(eval_inputs), len(eval_inputs))
        key = recipe_key(assignment, ranges) + ("" if count == len(eval_inputs) else f" [{SCREENED} {count} samples]")
        if key not in self.measured:
            self.step(key or "all int8")
            entries = backend.recipe({**self.fixed, **assignment}, self.scopes)
            # an upgraded recipe can give ops the target has no kernel for (all-int8 is the
            # model's own answer, which the build checks and reports op by op, however the
            # assignment spells it: {} or every group named "int8")
            upgraded = any(p != "int8" for p in {**self.fixed, **assignment}.values())

            digest: list[str] = []  # the bytes' sha256, taken once (23 MB a candidate on MiniLM)

            def build_and_score() -> tuple[bytes, dict]:
                with timed(f"int8 search: {backend.quantizer}"):
                    data = backend.quantize(entries, ranges)
                digest.append(hashlib.sha256(data).hexdigest())
                same = (digest[0], count)
                if same not in self.scored:
                    if not upgraded:
                        self._check_floor(data)  # before it is scored: a model over the board ends here
                    problem = judge.problem(data) if judge is not None and upgraded else None
                    if problem is not None:
                        self.scored[same] = {**asdict(AccuracySummary.failed_to_run(count)), "refused": problem}
                    else:
                        with timed(f"int8 search: candidates in {backend.runtime}"):
                            self.scored[same] = asdict(
                                search_candidates.score_candidate(
                                    data, eval_inputs[:count], lambda: self.reference()[:count], backend.outputs
                                )
                            )
                return data, self.scored[same]

            parts = {
                **self.parts,
                "recipe": entries,
                **({"ranges": ranges} if ranges != "min-max" else {}),
                **({"samples": count} if count != len(eval_inputs) else {}),
                **({"target_check": judge.target, "scored_in": judge.target} if judge is not None else {}),
            }
            data, score = cached_stage(
                "quant_candidate", parts, build_and_score, encode=encode_blob_and_json, decode=decode_blob_and_json
            )
            if not upgraded:
                self._check_floor(data)  # a cache hit was not checked in build_and_score
            score = dict(score)
            if "refused" in score:
                self.refused[key] = score.pop("refused")
            # (a cache hit was not quantized here: its digest is taken from the bytes)
            self.built.add(key, data, lambda: backend.quantize(entries, ranges), digest[0] if digest else None)
            self.measured[key] = AccuracySummary(**score)
        return self.measured[key]

    def evaluate(self, assignment: dict[str, str], ranges: str | None = None, samples: int | None = None) -> float:
        """The search's score of a recipe. The budget reads every output's mean per-sample cosine:
        the search aims at it too, so it never stops on a score the budget does not read."""
        return search_score(self.measure(assignment, ranges, samples), self.config.target_top1)

    def budget_score(self, assignment: dict[str, str]) -> float:
        """The budget's own metrics of a recipe."""
        summary = self.measure(assignment)
        cosine = summary.centered_cosine if summary.sample_cosine is None else summary.sample_cosine
        return top1_scaled(cosine, summary.top1_agreement, self.config.target_top1)
