"""Targets: one small class each, registered in one dict.

A target declares what it can take (its `Capability`, filled by its backend from that
backend's own lowering registry) and how to lower a `Program`. The CLI's `--target` choices
are the keys of `implemented_targets()`. Target classes live in light modules of their
backends (no torch/jax/litert import at module level), so listing targets stays instant.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tpuedge.shared_ir.errors import InternalError, UserError
from tpuedge.shared_ir.op_registry import OpRegistry

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = [
    "Capability",
    "BuildOption",
    "Target",
    "Lowered",
    "get_target",
    "all_targets",
    "implemented_targets",
    "register_target",
]

# Dtypes no target takes; the check reports them with a suggestion.
UNSUPPORTED_DTYPES_DEFAULT = frozenset({"torch.float64", "torch.complex64", "torch.complex128"})


@dataclass(frozen=True)
class Capability:
    """What a target can lower, as data.

    ops: the backend's registry (entries may be lowering functions or notes).
    decompose: applied to the program before checking, the same the backend applies itself
        when it lowers (None: the program is checked as captured).
    unsupported_dtypes: tensor dtypes (as "torch.float64") the target refuses.
    dynamic_shapes: whether symbolic dims are accepted.
    notes: op key -> why it is (not) supported / what to try; shown by `tpuedge ops`.
    suggestions: op key -> what to try when that op is unsupported (replaces the generic one).
    """

    target: str
    ops: OpRegistry
    decompose: Callable[[Any], Any] | None = None
    unsupported_dtypes: frozenset[str] = UNSUPPORTED_DTYPES_DEFAULT
    dynamic_shapes: bool = False
    notes: Mapping[str, str] = field(default_factory=dict)
    suggestions: Mapping[str, str] = field(default_factory=dict)
    # What the target's own rewrites will change in this program (not problems: the build
    # does them and announces their measured cost), e.g. "rewrote 1 GELU op(s) as ...".
    rewrite_notes: Callable[[Any], list[str]] | None = None


@dataclass(frozen=True)
class BuildOption:
    """One `tpuedge build` option a target accepts (the CLI builds click options from these)."""

    name: str  # python name, e.g. "quantize"; the flag is --quantize
    help: str
    type: Any = str  # str, int, float, bool (a flag), or a tuple of choices
    default: Any = None


@runtime_checkable
class Lowered(Protocol):
    """A program lowered for one target: inspectable, then compiled to an Artifact on disk."""

    def as_text(self) -> str: ...

    def compile(self, out_dir: Any = None) -> Any: ...


class Target:
    """Base class; subclasses set the class attributes and override the methods."""

    name: str = ""
    summary: str = ""
    runtime: str = ""  # the real runtime its artifacts run in
    implemented: bool = False  # only implemented targets are offered by `tpuedge build`

    def capability(self) -> Capability:
        """The ops this target lowers; may import the heavy backend."""
        raise NotImplementedError

    def build_options(self) -> list[BuildOption]:
        return []

    def lower(self, program: "Program", **options: Any) -> Lowered:
        raise UserError(
            f"Target {self.name!r} has no backend in this version of tpuedge yet; "
            f"choose one of: {', '.join(implemented_targets())}."
        )

    def load_artifact(self, path: Any) -> Any:
        raise NotImplementedError


# Light modules that define the built-in target classes, imported on first use.
_BUILTIN_TARGET_MODULES = ("tpuedge.cloud.target", "tpuedge.edge.targets")
_REGISTRY: dict[str, Target] = {}
_loaded = False


def register_target(target: Target) -> Target:
    if not target.name:
        raise InternalError(f"{type(target).__name__} has no name")
    if target.name in _REGISTRY:
        raise InternalError(f"target {target.name!r} is registered twice")
    _REGISTRY[target.name] = target
    return target


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_TARGET_MODULES:
        importlib.import_module(module)


def all_targets() -> dict[str, Target]:
    _ensure_loaded()
    return dict(sorted(_REGISTRY.items()))


def implemented_targets() -> dict[str, Target]:
    return {name: t for name, t in all_targets().items() if t.implemented}


def get_target(name: str) -> Target:
    targets = all_targets()
    if name not in targets:
        raise UserError(f"Unknown target {name!r}; choose one of: {', '.join(targets)}.")
    return targets[name]
