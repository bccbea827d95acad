"""The int8 search's rungs past the op groups (quantize/precision_search.py): the IR's
top-ranked points upgraded first, the ranked points as float islands as a last resort, and
every op type at the upgrade precision. Each measures its candidates through the search's
`evaluate`/`score` and returns its report for the recipe."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tpuedge.quantize.recipes import float_ranked, upgrade_ranked
from tpuedge.quantize.search_score import recipe_key, rounded
from tpuedge.quantize.search_settings import COMPUTE_HEAVY_OPS, EVERY_OP_TRIES, MIN_EVERY_OP_GAIN, TABLE_OPS
from tpuedge.shared_ir.errors import InternalError, UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.quantize.search_backend import CandidateBackend

__all__ = ["upgrade_ranked_points", "float_ranked_points", "every_op"]


def upgrade_ranked_points(
    program, backend: "CandidateBackend", calibration, eval_samples, scopes, evaluate, all_int8: float, config
) -> dict:
    """Rank every int8 point of the IR by its own cost (quantize/sensitivity.py), then give the
    costliest points' ops the config's upgrade (`upgrade_precision`: float islands on android,
    int16 activations on mcu), a growing prefix at a time, by measured cosine.
    `scopes` gains the ranked groups. Returns the assignment chosen and the report for the recipe."""
    from tpuedge.quantize.point_ranking import ranked_points
    from tpuedge.quantize.sensitivity import RANKING_SAMPLES, TooManyPoints
    from tpuedge.shared_ir.progress import stage_progress
    from tpuedge.shared_ir.stage_times import timed

    measure_on = eval_samples[:RANKING_SAMPLES]
    with stage_progress(f"{program.name}: int8 sensitivity of every IR point ({len(measure_on)} samples)", total=1):
        try:
            with timed("int8 search: IR sensitivity ranking"):
                ranking = ranked_points(program, calibration, measure_on, backend.converter_program)
        except (UserError, InternalError, TooManyPoints) as exc:  # the JAX lowering can't run it, or too many
            # points to rank: the op-group search (recurrent state, norms, ...) still runs
            return {
                "assignment": {},
                "report": {"unavailable": " ".join(str(exc).split())[:400]},
                "non_int8": [],
                "groups": [],
            }
    groups, group_scopes = backend.ranked_groups(ranking)
    scopes.update(group_scopes)
    with stage_progress(
        f"{program.name}: {config.upgrade_precision} for the top-ranked of {len(groups)} point(s)", total=len(groups)
    ):
        assignment, cosine, tried = upgrade_ranked(
            groups, evaluate, all_int8, target_cosine=config.target_cosine, precision=config.upgrade_precision
        )
    by_key = {g.key: g for g in groups}
    points = sum(by_key[key].kind == "ranked" for key in assignment)
    report = {
        "method": "each IR quantization point alone in fake int8 (JAX lowering, calibrated min/max ranges), "
        "1 - mean per-sample cosine of the outputs vs float",
        "samples": len(measure_on),
        "inputs": "calibration samples (the search's own)",
        "top": [s.to_json() for s in ranking[:10]],
        "groups": [g.key for g in groups],
        "precision": config.upgrade_precision,
        "prefixes_tried": [{"groups": k, "search_score": rounded(c)} for k, c in tried],
        "chosen": points,
    }
    non_int8 = [
        {
            "group": key,
            "kind": by_key[key].kind,
            "precision": precision,
            "ops": list(by_key[key].ops),
            "why": (
                f"ranked among the {points} costliest IR points in int8"
                if by_key[key].kind == "ranked"
                else "writes a model output from a ranked point's value (float keeps the output float)"
            )
            + f"; model cosine {rounded(all_int8)} -> {rounded(cosine)}",
        }
        for key, precision in assignment.items()
    ]
    return {"assignment": assignment, "report": report, "non_int8": non_int8, "groups": groups}


def float_ranked_points(program, ranked: dict, budget_score, assignment: dict, aim: float):
    """The search's last resort (float islands allowed) where `assignment`, all that int16 and the
    op groups found, scores below `aim` by the budget's metric: the top-ranked points as float
    islands on top of it, the fewest that reach `aim`. Returns (assignment, the ranked groups'
    non-int8 entries), or None when it changes nothing; the report gains the prefixes tried."""
    from tpuedge.shared_ir.progress import stage_progress

    start = budget_score(assignment)
    if start >= aim:
        return None
    groups = ranked["groups"]
    with stage_progress(f"{program.name}: float islands for the top-ranked of {len(groups)} point(s)", total=1):
        floated, floated_cosine, tried = float_ranked(groups, budget_score, assignment, start, target_cosine=aim)
    ranked["report"]["float_prefixes_tried"] = [{"float_groups": k, "sample_cosine": rounded(c)} for k, c in tried]
    if floated == assignment:
        return None
    by_key = {g.key: g for g in groups}
    why = (
        f"int16 and the op groups left the model at mean per-sample cosine {rounded(start)} (aim {rounded(aim)}); "
        f"float islands for the costliest points: {rounded(floated_cosine)}"
    )
    entries = [e for e in ranked["non_int8"] if floated.get(e["group"]) == e["precision"]]
    entries += [
        {"group": key, "kind": by_key[key].kind, "precision": precision, "ops": list(by_key[key].ops), "why": why}
        for key, precision in floated.items()
        if key in by_key and precision != "int8" and assignment.get(key) != precision
    ]
    return floated, entries


def every_op(
    backend: "CandidateBackend",
    assignment: dict,
    score,
    aim: float,
    refused: dict,
    scopes,
    ranges: str,
    precision: str,
) -> dict:
    """The search's last resort where `assignment` (the ranked points, the op groups, float
    islands) scores below its aim by `score`: every op type at `precision` on top of it, weights
    int8 (the config's upgrade: 16-bit activations on mcu, float compute on android, where LiteRT
    runs int16 on its reference kernels: ShuffleNetV2-x0.5's int8 candidate took 25.3 ms per
    invoke with every op int16, its float model 1.3 ms). Random-init DeiT-tiny on its held-out
    images: all-int8 0.84, every op int16 0.992. An op type the target refuses (named in
    `refused`, the target's check: TFLite-Micro has no int16 GATHER_ND) is left int8 and the rest
    measured again, at most EVERY_OP_TRIES times. Where it reaches `aim`, the table lookups and
    then the compute-heavy op types go back to int8 one at a time, each kept int8 while the aim holds. Returns the report:
    "kept" (it scores MIN_EVERY_OP_GAIN above `start`), and where kept the new "assignment" and
    its non_int8_ops "entry"."""
    types = backend.every_op_types()
    names = [name for name, _, _ in types]
    start = score(assignment)
    tried: list[dict] = []

    def measure_without(excluded: frozenset[str], **note) -> dict:
        """Every op type but `excluded` at `precision` on top of `assignment`, measured; its `tried` row."""
        group, members = backend.every_op_group(types, excluded)
        scopes[group.key] = members
        trial = {**assignment, group.key: precision}
        cosine = score(trial)
        why = refused.get(recipe_key(trial, ranges))
        tried.append(
            {"left_int8": sorted(excluded), "score": rounded(cosine), **note, **({"refused": why} if why else {})}
        )
        return tried[-1]

    excluded: frozenset[str] = frozenset()
    for _ in range(EVERY_OP_TRIES):
        if excluded >= set(names):
            break
        why = measure_without(excluded).get("refused")
        named = {name for name in names if why and re.search(rf"\b{name}\b", why.upper())} - excluded
        if not named:
            break
        excluded = excluded | named
    best = max((t for t in tried if "refused" not in t), key=lambda t: t["score"], default=None)
    report = {"precision": precision, "start_score": rounded(start), "tried": tried, "kept": False}
    if best is None or best["score"] < start + MIN_EVERY_OP_GAIN:
        return report
    # with score to spare, the tables and the heavy op types go back to int8 one at a time while
    # the aim holds: int8 tables are a quarter of the bytes, int8 kernels the fast ones (int16 in
    # LiteRT, ShuffleNetV2-x0.5: 1.6 ms per invoke -> 10.3 ms); tables first, each kind in graph order
    heavy = sorted(
        (name for name in names if name in TABLE_OPS + COMPUTE_HEAVY_OPS and name not in best["left_int8"]),
        key=lambda name: name not in TABLE_OPS,
    )
    for name in heavy if best["score"] >= aim else []:
        row = measure_without(frozenset(best["left_int8"]) | {name}, back_to_int8=name)
        if "refused" not in row and row["score"] >= aim:
            best = row
    group, members = backend.every_op_group(types, frozenset(best["left_int8"]))
    scopes[group.key] = members
    every = "every activation at 16 bits" if precision == "int16" else "every op in float (weights int8)"
    entry = {
        "group": group.key,
        "kind": group.kind,
        "precision": precision,
        "ops": list(group.ops),
        "why": f"the ranked points, the op groups and float islands left the model at {rounded(start)}, below the "
        f"search's aim; {every}: {best['score']}",
    }
    return {
        **report,
        "kept": True,
        "cosine": best["score"],
        "assignment": {**assignment, group.key: precision},
        "entry": entry,
    }
