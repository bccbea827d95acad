"""The float32-weights rung (android): where int8 weights alone keep a model below its aim, the
ops reading the weight tensors whose int8 values cost most (quantize/weight_sensitivity.py) keep
float32 weights, the fewest that reach the aim. Static int8's last rung
(quantize/precision_search.py) and dynamic-int8's one remedy."""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING

from tpuedge.quantize.search_score import recipe_key, rounded, top1_scaled
from tpuedge.quantize.search_settings import HELD_OUT_MARGIN, search_samples

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.search_backend import CandidateBackend

__all__ = ["float_weights_rung", "dynamic_int8_weights"]


def float_weights_rung(
    program, config, backend: "CandidateBackend", eval_samples, scopes, score, assignment: dict, aim: float
) -> dict:
    """The search's last rung (android): the IR's weight tensors ranked by their int8 cost alone
    (quantize/weight_sensitivity.py), then float32 weights for the ops reading the costliest, the
    fewest that reach `aim` on top of `assignment`, within FLOAT_WEIGHTS_BYTES_SHARE of the
    parameter count in extra bytes. Returns the report, with "kept" and, where kept, the new
    "assignment" and its non_int8_ops "entries"."""
    from tpuedge.quantize import search_settings
    from tpuedge.quantize.recipes import float_ranked
    from tpuedge.quantize.weight_sensitivity import WEIGHT_RANKING_SAMPLES, rank_weights, ranking_from_json
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_json, encode_json
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    samples = eval_samples[:WEIGHT_RANKING_SAMPLES]
    with (
        stage_progress(f"{program.name}: int8 cost of each weight tensor ({len(samples)} samples)", total=1),
        timed("int8 search: IR weight ranking"),
    ):
        # the program the converter saw (BatchNorm folded): its weights are the ones quantized
        lowered = backend.converter_program()
        parts = {"ir": program.fingerprint, "samples": data_digest(samples), "per_channel": config.per_channel}
        entries = cached_stage(
            "weight_ranking",
            parts,
            lambda: [w.to_json() for w in rank_weights(lowered, samples, per_channel=config.per_channel)],
            encode=encode_json,
            decode=decode_json,
        )
        ranking = ranking_from_json(lowered, entries)
    # float32 costs 3 bytes an element over int8: the extra stays within the size goal's slack (read
    # from the module, where a test narrows it)
    share, floor = search_settings.FLOAT_WEIGHTS_BYTES_SHARE, search_settings.FLOAT_WEIGHTS_BYTES_FLOOR
    cap = int((share * program.parameter_count + floor) / 3)
    groups, group_scopes = backend.weight_groups(ranking, cap)
    scopes.update(group_scopes)
    start = score(assignment)
    report = {
        "method": "each IR weight tensor alone rounded to int8 (symmetric, "
        f"{'per output channel' if config.per_channel else 'per tensor'}), activations float, "
        "1 - the worst output's mean per-sample cosine vs float (torch, the IR)",
        "samples": len(samples),
        "inputs": "calibration samples (the search's own)",
        "top": [w.to_json() for w in ranking[:10]],
        "weights_ranked": len(ranking),
        "float32_elements_cap": cap,
        "start_score": rounded(start),
        "kept": False,
    }
    if not groups:
        return report
    with stage_progress(
        f"{program.name}: float32 weights for the costliest of {len(groups)} weight tensor(s)", total=1
    ):
        floated, cosine, tried = float_ranked(groups, score, assignment, start, target_cosine=aim, precision="float32")
    report["prefixes_tried"] = [{"weights": k, "score": rounded(c)} for k, c in tried]
    if floated == assignment:
        return report
    why = (
        f"int8 weights left the model at {rounded(start)} (aim {rounded(aim)}); "
        f"float32 weights for the costliest: {rounded(cosine)}"
    )
    entries = [
        {"group": g.key, "kind": g.kind, "precision": "float32", "ops": list(g.ops), "why": why}
        for g in groups
        if floated.get(g.key) == "float32"
    ]
    return {**report, "kept": True, "cosine": rounded(cosine), "assignment": floated, "entries": entries}


def dynamic_int8_weights(
    program, config, calibration, backend: "CandidateBackend", quantized: bytes, recipe: dict, budget_cosine: float
) -> bytes:
    """dynamic-int8's one remedy (android): where its model scores below the aim on the
    calibration samples (the build holds its budget's samples out of them), the float32-weights
    rung (`float_weights_rung`): the ops reading the costliest weight tensors left unquantized,
    weights and activations. Returns the model (`quantized` where nothing better was measured);
    `recipe` gains "float_weights", and where kept its "non_int8_ops" and "quantizer_recipe"."""
    from tpuedge.quantize import search_candidates
    from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_blob_and_json, encode_blob_and_json
    from tpuedge.shared_ir.stage_times import timed

    eval_samples = search_samples(program, calibration)
    reference = functools.cache(lambda: [program.run(*s) for s in eval_samples])
    eval_inputs = [backend.layout_inputs(s) for s in eval_samples]
    aim = min(budget_cosine + HELD_OUT_MARGIN, 1.0)
    scopes: dict = {}
    scores: dict[str, float] = {}  # recipe key -> the budget's metric
    built = search_candidates.MeasuredCandidates(backend.quantizer)

    def score(assignment: dict[str, str]) -> float:  # the budget's metric, on the search's samples
        key = recipe_key(assignment)
        if key not in scores:
            entries = backend.recipe(assignment, scopes)

            def build_and_score() -> tuple[bytes, dict]:
                data = backend.quantize(entries) if assignment else quantized
                summary = search_candidates.score_candidate(data, eval_inputs, reference, backend.outputs)
                cosine = summary.centered_cosine if summary.sample_cosine is None else summary.sample_cosine
                return data, {"score": top1_scaled(cosine, summary.top1_agreement, config.target_top1)}

            parts = {
                "ir": program.fingerprint,
                "float": hashlib.sha256(backend.float_model).hexdigest(),
                "calibration": data_digest(eval_samples),
                "channels_last": config.channels_last,
                "recipe": entries,
                **({"target_top1": config.target_top1} if config.target_top1 is not None else {}),
            }
            with timed("dynamic-int8: float32-weights candidates"):
                data, meta = cached_stage(
                    "dynamic_candidate",
                    parts,
                    build_and_score,
                    encode=encode_blob_and_json,
                    decode=decode_blob_and_json,
                )
            scores[key] = float(meta["score"])
            built.add(key, data, lambda: backend.quantize(entries) if assignment else quantized)
        return scores[key]

    if score({}) >= aim:
        recipe["float_weights"] = None
        return quantized
    report = float_weights_rung(program, config, backend, eval_samples, scopes, score, {}, aim)
    recipe["float_weights"] = report
    if not report["kept"]:
        return quantized
    assignment = report.pop("assignment")
    recipe["non_int8_ops"] = report.pop("entries")
    recipe["quantizer_recipe"] = backend.recipe(assignment, scopes)
    # the prefix search ends on the one it keeps unless a later one measured worse
    key = recipe_key(assignment)
    return built.bytes_of(key, f"the dynamic-int8 recipe {key!r}")
