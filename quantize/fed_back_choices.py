"""Why a model that decodes inside its graph misses an integer build's accuracy budget.

A greedy decoder written into `forward` (an encoder-decoder whose steps each take the argmax of
the last one's logits) feeds a discrete choice back: an int8 rounding that flips one argmax gives
the next step another token, and every later step differs from the float model's. The error no
longer stays the size of one layer's rounding, so no precision of the search recovers it; the
budget refusal says so, with where the choices are made and what to do instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["fed_back_choices_note", "fed_back_choices_explained"]

_CHOICES = ("aten.argmax.default", "aten.argmin.default")


def fed_back_choices_note(exported_program) -> str | None:
    """The refusal's paragraph for a graph whose argmax / argmin results feed later ops; None
    when no such choice is fed back."""
    from tpuedge.shared_ir.sources import node_source

    fed = [
        n
        for n in exported_program.graph.nodes
        if n.op == "call_function" and str(n.target) in _CHOICES and any(u.op != "output" for u in n.users)
    ]
    if not fed:
        return None
    where = node_source(fed[0]) or fed[0].name
    return (
        f"The model feeds {len(fed)} argmax/argmin choice(s) back into its graph (first at {where}): a greedy "
        f"decode inside forward. An integer rounding that flips one choice changes every later step, so the error "
        f"compounds over the {len(fed)} fed-back steps, and static int8 and dynamic int8 both miss such budgets. "
        f"Decode on the host instead: export one step (its inputs and state in, logits and state out) and loop "
        f"it with the argmax outside the model, or build it for android in float (--quantize none / fp16)."
    )


@contextlib.contextmanager
def fed_back_choices_explained(exported_program) -> Iterator[None]:
    """A BudgetError raised inside gets that paragraph added where it applies."""
    from tpuedge.shared_ir.errors import BudgetError

    try:
        yield
    except BudgetError as exc:
        note = fed_back_choices_note(exported_program)
        if note is None:
            raise
        raise BudgetError(f"{exc}\n{note}") from None
