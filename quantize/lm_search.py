"""Choosing a language model's quantization: measured token agreement, never a guess.

    choice = choose_lm_scheme(name=..., target="android", reference=bundle.reference(), build=build,
                              runner_of=runner_of, scheme=scheme_or_auto, budget=budget,
                              search_text=..., eval_text=..., prompts=[ids, ...], greedy_tokens=16)

Backend-neutral: `build(LMScheme) -> candidate` makes a model (a backend's bytes) and
`runner_of(candidate) -> StepRunner` runs it. With a named scheme the one model is measured on
the held-out text and held to the budget. With `auto` the candidates (quantize/lm_schemes.py,
smallest first, and int4 with its most sensitive layers at int8) are ranked on the search half
of the text; the first that meets the budget there is measured on the held-out half, and kept if
it meets it there too. Either way the numbers reported are the held-out ones, and a model below
its budget raises BudgetError before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpuedge.quantize.lm_budget import LMBudget, lm_budget_error
from tpuedge.quantize.lm_schemes import AUTO, AUTO_CANDIDATES, LM_SCHEMES, LMScheme
from tpuedge.quantize.token_metrics import matching_prefix, token_agreement
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.generation import generate, teacher_forced_logits

__all__ = [
    "NotACandidate",
    "LMChoice",
    "choose_lm_scheme",
    "teacher_forced",
    "auto_candidates",
    "greedy_matches",
    "sensitive_parameters",
]


class NotACandidate(Exception):
    """`build` can't make this scheme for this model (its message says why, in a user's words)."""


@dataclass
class LMChoice:
    scheme: LMScheme
    candidate: Any
    accuracy: dict
    budget_entry: dict
    tried: list[dict] = field(default_factory=list)


def teacher_forced(runner, sequences: list[list[int]]) -> list[np.ndarray]:
    return [teacher_forced_logits(runner, seq) for seq in sequences]


def _targets(sequences: list[list[int]]) -> list[np.ndarray]:
    return [np.asarray(seq[1:], np.int64) for seq in sequences]


def auto_candidates(sensitive: list[str]) -> list[LMScheme]:
    """`auto`'s candidates, smallest first: int4 with the `sensitive` parameters (the LM head and the
    first and last blocks' matrices) at int8 right after plain int4 of the same block size."""
    out = []
    for name in AUTO_CANDIDATES:
        scheme = LM_SCHEMES[name]
        out.append(scheme)
        if scheme.weight_bits == 4 and sensitive:
            out.append(scheme.with_overrides({p: 8 for p in sensitive}))
    return out


def _label(scheme: LMScheme) -> str:
    return scheme.name + (f" (+{len(scheme.overrides)} at int8)" if scheme.overrides else "")


class _ReferenceInBackground:
    """The float IR's numbers, computed in a thread of their own while the candidates are built
    and run (torch and the runtimes release the GIL in their kernels: on two cores the pair
    takes about the longer of the two)."""

    def __init__(self, reference, texts: dict, prompts: list[list[int]], greedy_tokens: int):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tpuedge-float-reference")
        self._logits = {
            key: self._pool.submit(teacher_forced, reference, text.sequences) for key, text in texts.items()
        }
        self._greedy = [self._pool.submit(_greedy_ids, reference, ids, greedy_tokens) for ids in prompts]

    def logits(self, key: str) -> list[np.ndarray]:
        return self._logits[key].result()

    def greedy(self) -> list[list[int] | None]:
        return [g.result() for g in self._greedy]

    def close(self) -> None:
        for future in (*self._logits.values(), *self._greedy):
            future.cancel()
        self._pool.shutdown(wait=True)


def _greedy_ids(runner, ids: list[int], tokens: int) -> list[int] | None:
    room = min(tokens, runner.cache_length - len(ids))
    return generate(runner, ids, room).new_ids if room >= 1 else None


def choose_lm_scheme(
    *,
    name: str,
    target: str,
    reference,
    build: Callable[[LMScheme], Any],
    runner_of: Callable[[Any], Any],
    scheme: LMScheme | str,
    budget: LMBudget,
    search_text,
    eval_text,
    prompts: list[list[int]],
    greedy_tokens: int,
    sensitive: list[str] = (),
    on_candidate: Callable[[str], None] | None = None,
) -> LMChoice:
    """See the module docstring. `search_text` / `eval_text`: quantize.lm_text.EvalText."""
    texts = {"held_out": eval_text, **({"search": search_text} if scheme == AUTO else {})}
    background = _ReferenceInBackground(reference, texts, prompts, greedy_tokens)
    try:
        return _choose(
            name,
            target,
            background,
            build,
            runner_of,
            scheme,
            budget,
            search_text,
            eval_text,
            prompts,
            greedy_tokens,
            sensitive,
            on_candidate,
        )
    finally:
        background.close()


def _choose(
    name,
    target,
    background,
    build,
    runner_of,
    scheme,
    budget,
    search_text,
    eval_text,
    prompts,
    greedy_tokens,
    sensitive,
    on_candidate,
) -> LMChoice:
    held_targets = _targets(eval_text.sequences)
    tried: list[dict] = []
    rows = []
    if scheme == AUTO:
        search_targets = _targets(search_text.sequences)
        chosen = None
        for candidate_scheme in auto_candidates(list(sensitive)):
            if on_candidate:
                on_candidate(_label(candidate_scheme))
            try:
                candidate = build(candidate_scheme)
            except NotACandidate as exc:
                tried.append({"scheme": _label(candidate_scheme), "not_a_candidate": str(exc)})
                continue
            runner = runner_of(candidate)
            on_search = token_agreement(
                background.logits("search"), teacher_forced(runner, search_text.sequences), search_targets
            )
            entry = {"scheme": _label(candidate_scheme), "search": on_search.to_json(), "bytes": _size(candidate)}
            tried.append(entry)
            if budget.failures(on_search):
                rows.append((_label(candidate_scheme) + " (search)", on_search, budget.failures(on_search)))
                continue
            held = token_agreement(
                background.logits("held_out"), teacher_forced(runner, eval_text.sequences), held_targets
            )
            entry["held_out"] = held.to_json()
            rows.append((_label(candidate_scheme), held, budget.failures(held)))
            if not budget.failures(held):
                chosen = (candidate_scheme, candidate, runner, held)
                break
        if chosen is None:
            raise lm_budget_error(name, target, budget, rows, f"{search_text.source} / {eval_text.source}")
        scheme, candidate, runner, held = chosen
    else:
        try:
            candidate = build(scheme)
        except NotACandidate as exc:
            raise UserError(f"{name}: --quantize {scheme.name} can't be built for {target}: {exc}.") from None
        runner = runner_of(candidate)
        held = token_agreement(background.logits("held_out"), teacher_forced(runner, eval_text.sequences), held_targets)
        failures = budget.failures(held)
        if failures and not budget.allow_below:
            raise lm_budget_error(name, target, budget, [(_label(scheme), held, failures)], eval_text.source)
    greedy = _greedy_report(
        background.greedy(), [_greedy_ids(runner, ids, greedy_tokens) for ids in prompts], prompts, greedy_tokens
    )
    failures = budget.failures(held)
    accuracy = {"runtime_vs_float_ir": held.to_json(), "inputs": eval_text.source, "greedy": greedy}
    budget_entry = {
        **budget.to_json(),
        "met": not failures,
        "failures": failures,
        "written_below_budget": bool(failures),
    }
    return LMChoice(scheme, candidate, accuracy, budget_entry, tried)


def _greedy_report(wanted: list, got: list, prompts: list[list[int]], tokens: int) -> dict:
    matches = [
        {"prompt_tokens": len(ids), "tokens": len(want), "matching": matching_prefix(want, have)}
        for ids, want, have in zip(prompts, wanted, got)
        if want is not None
    ]
    return {
        "prompts": len(matches),
        "tokens_each": tokens,
        "matching": matches,
        "all_identical": all(m["matching"] == m["tokens"] for m in matches),
    }


def greedy_matches(reference, runner, prompts: list[list[int]], tokens: int) -> dict:
    """For each prompt, how many greedy tokens the candidate keeps identical to the float IR's."""
    return _greedy_report(
        [_greedy_ids(reference, ids, tokens) for ids in prompts],
        [_greedy_ids(runner, ids, tokens) for ids in prompts],
        prompts,
        tokens,
    )


def _size(candidate) -> int | None:
    return len(candidate) if isinstance(candidate, (bytes, bytearray)) else None


def sensitive_parameters(bundle) -> list[str]:
    """The matrices an int4 model keeps at int8 in `auto`'s mixed candidates: the LM head (the
    last matrix the logits are computed with, the tied embedding table included) and those of
    the first and last blocks (`.layers.<i>.` or GPT-2's `.h.<i>.` in the parameter name)."""
    import re

    from tpuedge.shared_ir.generative.decoder import DECODE

    program = bundle.entries[DECODE]
    names = [n for n, t in program.exported_program.state_dict.items() if t.dim() == 2]
    blocks = {}
    for name in names:
        found = re.search(r"\.(?:layers|h|blocks)\.(\d+)\.", name)
        if found:
            blocks.setdefault(int(found.group(1)), []).append(name)
    chosen = [n for n in names if re.search(r"(lm_head|embed_tokens|wte|output)\b", n)]
    if blocks:
        chosen += blocks[min(blocks)] + blocks[max(blocks)]
    return list(dict.fromkeys(chosen))
