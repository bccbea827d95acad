"""litert-torch's internals as tpuedge uses them, verified on litert-torch 0.10.

Required, with no public equivalent in 0.10 for a lowering that starts from an ExportedProgram
(`litert_torch.convert` re-exports the module): its FX passes and its converter entry point
(`_convert.fx_passes`, `_convert.litert_converter`). Their gate is the requirement range
(litert-torch>=0.10,<0.11); a release without them fails with an InternalError naming them.

Fast paths, each off on another release, under `public_api_only()`, or where a private call
raises, with the public route that gives the same flatbuffer:
  - `decompositions_replaced(ours)`: litert-torch's `fx_infra.safe_run_decompositions` is `ours`
    for the block's threads (edge/litert/decompose_in_place.py's in-place decomposition); else its own
    whole re-trace (`ExportedProgram.run_decompositions`);
  - `decomposition_helpers()`: the checks its own function runs first; else Unavailable;
  - `lowerings_replaced(ours)`: ops of its lowering registry lowered by `ours` for the block's
    threads (edge/litert/direct_lowerings.py); else its own jax-bridge lowerings;
  - `ceil_mode_padding(...)`: its max-pool padding rule; else None (its own lowering runs);
  - `composite_ops()`: the ops its composite pass keeps whole; else none (the android
    capability then names them by their lowering, not as a composite);
  - `from_layout_pass(target)`: a function its layout pass left in the graph; else False (its
    canonicalizing re-trace then always runs).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.upstream_gate import ScopedPatch, Unavailable, fell_back, verified

__all__ = [
    "VERIFIED_LITERT_TORCH",
    "ceil_mode_padding",
    "composite_ops",
    "converter",
    "decomposition_helpers",
    "decompositions_replaced",
    "fx_passes",
    "from_layout_pass",
    "import_litert_torch",
    "lowerings_replaced",
]

VERIFIED_LITERT_TORCH = ("0.10",)
_DECOMPOSITION_PATCH = ScopedPatch()
_LOWERING_PATCH = ScopedPatch()


def _fast(fast_path: str) -> bool:
    if verified("litert-torch", VERIFIED_LITERT_TORCH):
        return True
    fell_back(fast_path, "litert-torch release not verified, or public API only")
    return False


def import_litert_torch() -> None:
    """litert-torch and its jax bridge (which its converter imports), JAX's process-wide x64
    flag kept as it was (shared_ir/jax_compat.py)."""
    from tpuedge.shared_ir.jax_compat import x64_switch_kept

    with x64_switch_kept():
        import litert_torch  # noqa: F401
        import litert_torch._convert.core  # noqa: F401


def _required(name: str):
    try:
        if name == "fx_passes":
            from litert_torch._convert import fx_passes as module
        else:
            from litert_torch._convert import litert_converter as module
    except ImportError as exc:
        raise InternalError(
            f"this litert-torch has no _convert.{name} ({exc}); tpuedge lowers through "
            "litert-torch 0.10's (pip install -c constraints.txt .)"
        ) from exc
    return module


def fx_passes():
    """litert-torch's FX pass module (`_convert.fx_passes`)."""
    return _required("fx_passes")


def converter():
    """litert-torch's converter entry point module (`_convert.litert_converter`)."""
    return _required("litert_converter")


def decomposition_helpers() -> tuple[Callable, Callable]:
    """(whether a table changes the program, erase its tensor-metadata asserts): what litert-torch's
    `safe_run_decompositions` runs around its re-trace. Raises Unavailable off the fast path."""
    if not _fast("in-place decomposition"):
        raise Unavailable("litert-torch's decomposition helpers are gated off")
    try:
        from litert_torch.fx_infra import _safe_run_decompositions as safe

        return safe._require_decomp, safe._erase_assert_tensor_metadata_nodes
    except (ImportError, AttributeError) as exc:
        fell_back("in-place decomposition", repr(exc))
        raise Unavailable(repr(exc)) from exc


@contextlib.contextmanager
def decompositions_replaced(ours: Callable) -> Iterator[None]:
    """litert-torch's `safe_run_decompositions` is `ours(ep, table, can_skip, whole_retrace=its
    own)` for the block's threads; on the public route, its own."""
    stack = contextlib.ExitStack()
    if _fast("in-place decomposition"):

        def install(patch: ScopedPatch):
            from litert_torch import fx_infra

            whole = fx_infra.safe_run_decompositions

            def replaced(exported_program, table=None, can_skip=True):
                return ours(exported_program, table, can_skip, whole_retrace=whole)

            fx_infra.safe_run_decompositions = patch.route(replaced, whole)

            def undo() -> None:
                fx_infra.safe_run_decompositions = whole

            return undo

        _DECOMPOSITION_PATCH.enter_or_fall_back(stack, "in-place decomposition", install)
    with stack:
        yield


@contextlib.contextmanager
def lowerings_replaced(ours: dict) -> Iterator[None]:
    """For the block's threads, each op of `ours` that litert-torch's registry lowers is lowered by
    `ours[op](its_own_lowering, lctx, *args, **kwargs)`; on the public route, by its own."""
    stack = contextlib.ExitStack()
    if _fast("direct lowerings"):

        def install(patch: ScopedPatch):
            from litert_torch.backend.lowerings import registry

            ops = registry.global_registry.registered_ops
            saved = {op: ops[op] for op in ours if ops.get(op) is not None}  # one it doesn't lower stays so
            for op, original in saved.items():
                ops[op] = patch.route(_bound(ours[op], original), original)
            return lambda: ops.update(saved)

        _LOWERING_PATCH.enter_or_fall_back(stack, "direct lowerings", install)
    with stack:
        yield


def _bound(ours, original):
    def lower(lctx, *args, **kwargs):
        return ours(original, lctx, *args, **kwargs)

    return lower


def ceil_mode_padding(padding, input_shape, kernel, stride, dilation, ceil_mode) -> list | None:
    """litert-torch's (low, high) padding pairs of a pool's spatial axes, or None (then its own
    lowering of that pool runs)."""
    if not _fast("direct lowerings"):
        return None
    try:
        from litert_torch.backend.lowerings._jax_lowerings.lowerings import _ceil_mode_padding

        return list(_ceil_mode_padding(padding, input_shape, kernel, stride, dilation, ceil_mode))
    except (ImportError, AttributeError, TypeError) as exc:
        fell_back("direct lowerings", repr(exc))
        return None


def composite_ops() -> list:
    """The ops litert-torch's composite pass keeps whole (as StableHLO composites)."""
    if not _fast("composite op list"):
        return []
    try:
        return list(fx_passes().build_aten_composite_pass._composite_builders)
    except AttributeError as exc:
        fell_back("composite op list", repr(exc))
        return []


def from_layout_pass(target) -> bool:
    """Whether `target` is a function litert-torch's layout pass left in the graph (its NHWC
    transposes and wrappers)."""
    if not _fast("layout pass functions"):
        return False
    package = "litert_torch._convert.fx_passes.optimize_layout_transposes_pass"
    return getattr(target, "__module__", "").startswith(package + ".") and package in sys.modules
