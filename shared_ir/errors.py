"""The kinds of error tpuedge raises.

`UserError` is the user's: an unsupported op, bad input, a model over budget. It carries a
one-paragraph message that names the problem and the fix; the CLI prints it and exits 2.
`BudgetError`: a build whose model misses its accuracy budget; the CLI prints the recipes it
measured and exits 1. `InternalError` is ours: a bug in tpuedge. Nothing else should escape a public entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "TpuedgeError",
    "UserError",
    "InternalError",
    "BudgetError",
    "Problem",
    "ProblemsError",
    "EXIT_USER_ERROR",
    "EXIT_BELOW_BUDGET",
]

EXIT_USER_ERROR = 2
EXIT_BELOW_BUDGET = 1


class TpuedgeError(Exception):
    """Base of every error tpuedge raises on purpose."""


class UserError(TpuedgeError):
    """Something about the user's model, data, options or files must change. Exit code 2."""

    exit_code = EXIT_USER_ERROR


class BudgetError(TpuedgeError):
    """A build ran correctly but its model misses the accuracy budget it was given; nothing was
    written. Exit code 1: the input was fine (that is 2), the result is not good enough."""

    exit_code = EXIT_BELOW_BUDGET


class InternalError(TpuedgeError):
    """A bug in tpuedge itself; the message says what invariant broke."""


@dataclass(frozen=True)
class Problem:
    """One thing a target can't take, found before any output is written.

    kind: "op", "dtype", "dynamic-shape", "budget", "input", ...
    subject: the op / tensor / input the problem is about (e.g. "aten.gelu.default").
    count: how many graph nodes have it.
    sources: model source lines ("model.py:42 in forward") where it came from.
    suggestion: what to try.
    """

    kind: str
    subject: str
    message: str
    suggestion: str = ""
    count: int = 1
    sources: tuple[str, ...] = field(default_factory=tuple)

    def format(self) -> str:
        head = f"[{self.kind}] {self.subject}"
        if self.count > 1:
            head += f" (x{self.count})"
        text = f"{head}: {self.message}"
        if self.sources:
            text += " at " + "; ".join(self.sources)
        if self.suggestion:
            text += f". Try: {self.suggestion}"
        return text


class ProblemsError(UserError):
    """Several problems reported at once (e.g. every op a target can't lower)."""

    def __init__(self, headline: str, problems: list[Problem]):
        self.headline = headline
        self.problems = list(problems)
        body = "\n".join("  - " + p.format() for p in self.problems)
        super().__init__(f"{headline}\n{body}" if body else headline)
