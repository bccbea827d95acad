"""Targets: one small class each, found through the `tpuedge.targets` entry-point group.

A target declares what it can take (its `Capability`, filled by its backend from that
backend's own lowering registry) and how to lower a `Program`. Every target, the built-in ones
included, is an entry point `name = "package.module:TargetClass"` in the group, so a
third-party package adds one with no edit here. The CLI's `--target` choices are the keys of
`implemented_targets()`. Entry points name light modules (no torch/jax/litert import at module
level), so listing targets stays instant.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tpuedge.shared_ir.errors import InternalError, UserError
from tpuedge.shared_ir.op_registry import OpRegistry

if TYPE_CHECKING:  # pragma: no cover
    from importlib import metadata

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
    "ir_evaluator",
    "ENTRY_POINT_GROUP",
]

ENTRY_POINT_GROUP = "tpuedge.targets"

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
    max_rank: op key -> (highest tensor rank the target runs it at, whose limit it is).
    max_inputs: op key -> (most tensors it takes as inputs, whose limit it is, what to try).
    rewritten: op packet -> how the target's own IR passes rewrite it (`tpuedge ops` shows it).
    random_ops: whether ops that draw random numbers (torch's nondeterministic_seeded tag: rand,
        bernoulli, dropout in train mode) are taken; an inference artifact checked against torch
        is not, as no converted model can match a forward that differs from run to run.
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
    # The target's own IR rewrites of ops, ExportedProgram -> ExportedProgram (None: it has
    # none), without layout-only ones that permute weights. Quantization-aware training applies
    # them so it fakes int8 on the ops the target builds, and trains weights it can sync back.
    rewrite: Callable[[Any], Any] | None = None
    # op key -> (the highest rank the target runs it at, whose limit that is), judged on the
    # decomposed program, e.g. {"aten.permute.default": (5, "TFLite-Micro's TRANSPOSE kernel")}
    max_rank: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    # op key -> (the most tensors the target's kernel takes, whose limit, what to try), judged on
    # the decomposed program, e.g. {"aten.cat.default": (10, "TFLite-Micro's CONCATENATION", ...)}
    max_inputs: Mapping[str, tuple[int, str, str]] = field(default_factory=dict)
    # op packet ("aten.leaky_relu") -> how the target's IR passes rewrite it before the check
    # (often for some forms only: "with even windows"); the check still refuses what stays
    rewritten: Mapping[str, str] = field(default_factory=dict)
    random_ops: bool = True


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
    # Suffixes of single files this target opens when they come without a build folder
    # (e.g. ".tflite"): `load_file` opens them; `tpuedge.load` asks targets in name order.
    opens_files: tuple[str, ...] = ()

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

    def lower_bundle(self, program_bundle: Any, /, **options: Any) -> Lowered:
        """Lower a ProgramBundle (a decoder's prefill and decode, or buckets) for this target."""
        raise UserError(
            f"Target {self.name!r} does not build {program_bundle.kind} bundles (several entry points sharing weights) yet; "
            "build a single-entry model for it, or choose a target that takes them."
        )

    def options_except(self, options: dict, others: tuple[str, ...], kind: str) -> dict:
        """`options` without those named in `others` (options for another kind of model: a language
        model's, a single-entry model's), which must be at their defaults: one given for the wrong
        kind of model is an error, not ignored."""
        defaults = {o.name: o.default for o in self.build_options()}
        wrong = sorted(k for k in others if k in options and options[k] is not None and options[k] != defaults.get(k))
        if wrong:
            flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
            raise UserError(f"{flags} does not apply to {kind}; drop it.")
        return {k: v for k, v in options.items() if k not in others}

    def load_artifact(self, path: Any) -> Any:
        """Open a build folder this target wrote (its manifest is already checked)."""
        raise NotImplementedError

    def load_file(self, path: Any) -> Any:
        """Open a bare file with one of `opens_files`' suffixes (no manifest: IR unknown)."""
        raise NotImplementedError

    def ir_evaluator(self) -> Any:
        """The IR lowered to an array framework with a hook on every value
        (quantize.sensitivity.IREvaluator), where this target's backend has one; None otherwise."""
        return None


_REGISTRY: dict[str, Target] = {}
_loaded = False
_LOAD_LOCK = threading.Lock()


def register_target(target: Target) -> Target:
    if not target.name:
        raise InternalError(f"{type(target).__name__} has no name")
    if target.name in _REGISTRY:
        raise InternalError(f"target {target.name!r} is registered twice")
    _REGISTRY[target.name] = target
    return target


def _checkout_entry_points() -> list[metadata.EntryPoint]:
    """The group as this checkout's pyproject.toml declares it, for a checkout run without an
    install (no tpuedge metadata on the path to read entry points from)."""
    import tomllib
    from importlib import metadata

    # in a checkout this file is <root>/shared_ir/targets.py; installed, no pyproject.toml is there
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if not pyproject.is_file():
        return []
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    if project.get("name") != "tpuedge":
        return []
    table = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [metadata.EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in table.items()]


def _entry_points() -> list[metadata.EntryPoint]:
    from importlib import metadata  # here, not at import: `tpuedge --help` never reads the group

    found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    # tpuedge's own targets live in its namespace; none found means no tpuedge metadata on the
    # path (a checkout run without an install). Not `ep.dist.name`: that parses every METADATA.
    if not any(ep.value.startswith("tpuedge.") for ep in found):
        found += _checkout_entry_points()
    return sorted(found, key=lambda ep: ep.name)


def _load_entry_point(ep: metadata.EntryPoint) -> Target:
    provider = getattr(ep.dist, "name", None) or "this checkout"
    try:
        obj = ep.load()
        target = obj() if isinstance(obj, type) else obj
    except Exception as exc:
        raise UserError(
            f"The {ENTRY_POINT_GROUP} entry point {ep.name} = {ep.value} (from {provider}) failed to load "
            f"({type(exc).__name__}: {exc}); fix or uninstall that package."
        ) from exc
    if not isinstance(target, Target) or target.name != ep.name:
        raise UserError(
            f"The {ENTRY_POINT_GROUP} entry point {ep.name} = {ep.value} (from {provider}) must name a Target "
            f"class whose name is {ep.name!r}; got {type(target).__name__} named {getattr(target, 'name', None)!r}."
        )
    return target


def _ensure_loaded() -> None:
    """Loads every entry point, then registers them all, so an entry point that fails leaves the
    registry as it was (the next call raises the same error), never silently partial."""
    global _loaded
    with _LOAD_LOCK:
        if _loaded:
            return
        loaded: dict[str, Target] = {}
        seen: dict[str, str] = {}
        for ep in _entry_points():
            if ep.name in seen:
                if seen[ep.name] == ep.value:  # the same package seen twice on the path
                    continue
                raise UserError(
                    f"Two packages register target {ep.name!r} in {ENTRY_POINT_GROUP}: {seen[ep.name]} and "
                    f"{ep.value}; uninstall one of them."
                )
            seen[ep.name] = ep.value
            loaded[ep.name] = _load_entry_point(ep)
        for target in loaded.values():
            register_target(target)
        _loaded = True


def ir_evaluator() -> Any:
    """The first target's (by name) IR evaluator (`Target.ir_evaluator`): how a backend below
    another, or beside it, runs the IR in fake int8 without importing it. UserError where no
    installed target has one."""
    for target in all_targets().values():
        evaluator = target.ir_evaluator()
        if evaluator is not None:
            return evaluator
    raise UserError("no installed target lowers the IR with a hook on every value (cloud-tpu's JAX interpreter does)")


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
