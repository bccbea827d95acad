"""Graph passes on the shared IR, one per module, run by one `PassManager`.

A pass takes an ExportedProgram and returns a NEW one (the input is never mutated) plus a
`PassResult` saying what it changed, so targets can announce rewrites in the console and the
manifest. Passes work on the IR as captured (ATen ops with `meta["val"]`), before any
backend decomposes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Pass", "PassResult", "PassManager", "copy_program", "keep_node_names"]


@dataclass(frozen=True)
class PassResult:
    """What one pass did: `changed` nodes (count) and a one-line human description."""

    name: str
    changed: int
    description: str = ""
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"pass": self.name, "changed": self.changed, "description": self.description, **self.details}


class Pass(Protocol):
    name: str

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]: ...


def copy_program(exported_program: Any) -> Any:
    """A deep copy whose graph a pass may edit (parameters are shared, not copied)."""
    import copy
    import warnings

    memo = {id(t): t for t in exported_program.state_dict.values()}
    memo.update({id(t): t for t in exported_program.constants.values()})
    with warnings.catch_warnings():  # torch's pytree warns about its own LeafSpec while copying
        warnings.simplefilter("ignore", FutureWarning)
        copied = copy.deepcopy(exported_program, memo)
    keep_node_names(exported_program.graph, copied.graph)
    return copied


def keep_node_names(original: Any, copied: Any) -> None:
    """Give a copied graph's nodes their original names back.

    torch.fx renames a node whose name is a Python builtin when it copies a graph: a model whose
    forward takes `input` (torchvision's LRASPP, many user models) came back with a placeholder
    `input_1` while the graph signature still said `input`, and the copy failed validation
    ("Input spec name input does not match node name input_1"). torch.export names nodes
    directly, so the copy does too; the names were unique in the original, so they stay so.
    """
    for before, after in zip(original.nodes, copied.nodes):
        if after.name != before.name:
            after.name = before.name


class PassManager:
    """Runs passes in order; `run` returns the final program and one result per pass."""

    def __init__(self, passes: Sequence[Pass]):
        self.passes = list(passes)

    def run(self, exported_program: Any) -> tuple[Any, list[PassResult]]:
        results = []
        for p in self.passes:
            exported_program, result = p(exported_program)
            results.append(result)
        return exported_program, results

    def __call__(self, exported_program: Any) -> Any:
        """ExportedProgram -> ExportedProgram (the shape `Capability.decompose` expects)."""
        return self.run(exported_program)[0]
