"""torch's internals that tpuedge reads or patches, each behind a version gate with a public route.

Verified on torch 2.13 (`VERIFIED_TORCH`). On any other release, under `public_api_only()`, or
where a private call raises, each function here takes its public route, which gives the same
artifacts, only slower:

  - op kinds: the classes of torch's own ops, taken from ops (`type(torch.ops.aten.add)`), need no
    gate; a higher-order op is otherwise told by its namespace;
  - `has_composite_implicit_kernel`: the dispatcher's C++ table, else `OpOverload`'s public
    `has_kernel_for_dispatch_key` (which also counts Python kernels: at most a needless re-trace);
  - pytree helpers: torch's private pytree, else a walk over lists, tuples and dicts;
  - `tensor_metadata`: shape_prop's extractor, else the same `TensorMetadata` built here;
  - `cia_ops_walked_once()`: torch walks every C++ composite-implicit op into `torch.ops` on
    each re-trace (~35 walks of a lowering, ~0.9 s); the block walks once and makes the walks
    inside it no-ops, for its own threads only; else no patch (the walks run);
  - `retrace_internals()` (edge/litert/decompose_in_place.py's in-place decomposition): torch.export's
    re-trace pieces, else `Unavailable`, and the caller runs the public `run_decompositions`;
  - `op_schema`: an op's FunctionSchema (arguments, alias and mutation facts). torch has no
    public accessor for it: `OpOverload._schema` is what torch.library and torch's own passes
    read, so it is read here only, and any other object is "no schema";
  - `scheduler_field`: a torch LR scheduler's field that has no public accessor (OneCycleLR's
    phase table, SequentialLR's schedulers and milestones), else the same key of the public
    `state_dict()`; `sequential_schedulers`: SequentialLR's schedulers, which only the private
    field holds as objects, so off the gate they are `Unavailable` and the caller says so;
  - `op_name_parts`: an op's namespace, name and overload, from its public `name()`;
  - `snapshot_internals()` (shared_ir/program_snapshot.py): the pieces a program snapshot is
    written and read with, else `Unavailable`, and programs load with `torch.export.load`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from types import SimpleNamespace

from tpuedge.shared_ir.upstream_gate import ScopedPatch, Unavailable, fell_back, verified

__all__ = [
    "VERIFIED_TORCH",
    "cia_ops_walked_once",
    "has_composite_implicit_kernel",
    "is_higher_order_op",
    "is_op_overload",
    "is_op_packet",
    "op_name_parts",
    "op_schema",
    "preload_export",
    "scheduler_field",
    "sequential_schedulers",
    "retrace_internals",
    "snapshot_internals",
    "tensor_metadata",
    "tree_leaves",
    "tree_map",
    "tree_map_only",
]

VERIFIED_TORCH = ("2.13",)
_CIA = "CompositeImplicitAutograd"


def _fast(fast_path: str) -> bool:
    if verified("torch", VERIFIED_TORCH):
        return True
    fell_back(fast_path, "torch release not verified, or public API only")
    return False


@functools.cache
def _op_classes() -> tuple[type, type]:
    import torch

    return type(torch.ops.aten.add.Tensor), type(torch.ops.aten.add)


def is_op_overload(target) -> bool:
    """An ATen (or custom) op overload, `aten.add.Tensor`."""
    return isinstance(target, _op_classes()[0])


def is_op_packet(target) -> bool:
    """An op's packet of overloads, `aten.add`."""
    return isinstance(target, _op_classes()[1])


def is_higher_order_op(target) -> bool:
    """A higher-order op (`torch.cond`, a wrapped autocast region, ...)."""
    if _fast("higher-order op class"):
        import torch

        try:
            return isinstance(target, torch._ops.HigherOrderOperator)
        except AttributeError as exc:
            fell_back("higher-order op class", repr(exc))
    return not is_op_overload(target) and getattr(target, "namespace", None) == "higher_order"


def scheduler_field(scheduler, name: str, default=Unavailable):
    """`scheduler`'s field `name` (private in torch.optim.lr_scheduler), read directly when torch
    is verified, else from its public `state_dict()`. A missing field is `default` when one is
    given, else `Unavailable`."""
    found = vars(scheduler) if _fast("torch.optim.lr_scheduler fields") else scheduler.state_dict()
    if name in found:
        return found[name]
    if default is Unavailable:
        raise Unavailable(f"{type(scheduler).__name__}.{name}")
    return default


def sequential_schedulers(scheduler) -> list:
    """SequentialLR's schedulers, as objects: only its private field has them (its state_dict()
    holds their states), so off the gate they are `Unavailable`."""
    if not _fast("torch.optim.lr_scheduler fields"):
        raise Unavailable("SequentialLR._schedulers")
    return list(vars(scheduler)["_schedulers"])


def op_schema(target):
    """The FunctionSchema of `target` when it is a torch op (an OpOverload), else None."""
    if not is_op_overload(target):
        return None
    return getattr(target, "_schema", None)


def op_name_parts(target) -> tuple[str, str, str]:
    """("aten", "add", "Tensor") for aten.add.Tensor: an op's namespace, name and overload, read
    from its public qualified name ("aten::add.Tensor"; the default overload has no suffix)."""
    namespace, _, rest = target.name().partition("::")
    name, _, overload = rest.partition(".")
    return namespace, name, overload or "default"


def has_composite_implicit_kernel(op) -> bool:
    """Whether torch decomposes `op` itself (a CompositeImplicitAutograd kernel)."""
    import torch

    if _fast("composite-implicit kernel lookup"):
        try:
            return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), _CIA)
        except (AttributeError, RuntimeError) as exc:
            fell_back("composite-implicit kernel lookup", repr(exc))
    return op.has_kernel_for_dispatch_key(torch.DispatchKey.CompositeImplicitAutograd)


def _children(tree):
    if isinstance(tree, (list, tuple)):
        return list(tree)
    if isinstance(tree, dict):
        return list(tree.values())
    return None


def _pytree():
    if _fast("pytree"):
        try:
            import torch.utils._pytree as pytree

            return pytree
        except ImportError as exc:
            fell_back("pytree", repr(exc))
    return None


def tree_leaves(tree) -> list:
    """The leaves of nested lists, tuples and dicts, in order."""
    pytree = _pytree()
    if pytree is not None:
        return pytree.tree_leaves(tree)
    children = _children(tree)
    return [tree] if children is None else [leaf for child in children for leaf in tree_leaves(child)]


def tree_map(fn, tree):
    """`tree` with `fn` applied to each leaf (namedtuples stay namedtuples)."""
    pytree = _pytree()
    if pytree is not None:
        return pytree.tree_map(fn, tree)
    if isinstance(tree, dict):
        return type(tree)((k, tree_map(fn, v)) for k, v in tree.items())
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(tree_map(fn, v) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, v) for v in tree)
    return fn(tree)


def tree_map_only(cls, fn, tree):
    """`tree_map`, `fn` applied to leaves of type `cls` only."""
    return tree_map(lambda leaf: fn(leaf) if isinstance(leaf, cls) else leaf, tree)


def tensor_metadata(tensor):
    """The `TensorMetadata` torch's shape propagation writes into a node's `tensor_meta`."""
    import torch
    from torch.fx.passes.shape_prop import TensorMetadata

    if _fast("tensor metadata"):
        try:
            from torch.fx.passes.shape_prop import _extract_tensor_metadata

            return _extract_tensor_metadata(tensor)
        except (ImportError, TypeError) as exc:
            fell_back("tensor metadata", repr(exc))
    memory_format = None
    if tensor.layout == torch.strided:
        for candidate in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
            try:
                if tensor.is_contiguous(memory_format=candidate):
                    memory_format = candidate
                    break
            except RuntimeError:  # channels_last of the wrong rank
                continue
    if tensor.is_quantized:
        raise Unavailable("a quantized tensor's metadata")  # none in a float program
    stride = tensor.stride() if tensor.layout == torch.strided else ()
    return TensorMetadata(tensor.shape, tensor.dtype, tensor.requires_grad, stride, memory_format, False, {})


_CIA_PATCH = ScopedPatch()


def _no_walk() -> None:
    return None


def _walk_once(patch: ScopedPatch):
    from torch._export import utils as export_utils

    walk = export_utils._materialize_cpp_cia_ops
    walk()
    export_utils._materialize_cpp_cia_ops = patch.route(_no_walk, walk)

    def undo() -> None:
        export_utils._materialize_cpp_cia_ops = walk

    return undo


@contextlib.contextmanager
def cia_ops_walked_once() -> Iterator[None]:
    """One walk of torch's composite-implicit op registrations on entry; torch's re-walks inside
    the block, in the threads inside it, do nothing. No op is registered during a lowering (the
    graph's ops all existed at export), so one walk per block does."""
    stack = contextlib.ExitStack()
    if _fast("composite-implicit op walk"):
        # nothing patched on failure: torch walks as it does
        _CIA_PATCH.enter_or_fall_back(
            stack, "composite-implicit op walk", _walk_once, (ImportError, AttributeError, RuntimeError)
        )
    with stack:
        yield


def preload_export() -> None:
    """Import what `torch.export.export` imports on first use (so a stage timer can name it)."""
    if _fast("export preload"):
        with contextlib.suppress(ImportError):
            import torch.export._trace  # noqa: F401

            return
    import torch.export  # noqa: F401


def retrace_internals() -> SimpleNamespace:
    """The pieces of torch.export's decomposition re-trace, to trace one node as it would; raises
    Unavailable off the verified releases (the caller re-traces the whole program instead)."""
    if not _fast("in-place decomposition"):
        raise Unavailable("torch's re-trace internals are gated off")
    try:
        import torch
        from torch._dispatch.python import enable_python_dispatcher
        from torch._export.utils import _is_cia_op, _special_op_to_preserve_cia
        from torch._functorch._aot_autograd.functional_utils import from_fun, has_data_mutation, to_fun
        from torch._guards import detect_fake_mode
        from torch._subclasses.functional_tensor import FunctionalTensorMode
        from torch.export._trace import _ignore_backend_decomps
        from torch.export.exported_program import (
            _override_composite_implicit_decomp,
            _split_decomp_table_to_cia_and_python_decomp,
        )
    except ImportError as exc:
        fell_back("in-place decomposition", repr(exc))
        raise Unavailable(repr(exc)) from exc

    def functional_mode():
        # as export's re-trace sets it up: tokens for effectful ops found as they come
        return FunctionalTensorMode(pre_dispatch=False, export=True, _allow_token_discovery=True)

    return SimpleNamespace(
        enable_python_dispatcher=enable_python_dispatcher,
        functional_mode=functional_mode,
        to_fun=to_fun,
        from_fun=from_fun,
        has_data_mutation=has_data_mutation,
        sync=torch._sync,
        is_cia_op=_is_cia_op,
        preserve_cia=_special_op_to_preserve_cia,
        detect_fake_mode=detect_fake_mode,
        ignore_backend_decomps=_ignore_backend_decomps,
        override_composite_implicit_decomp=_override_composite_implicit_decomp,
        split_decomp_table=_split_decomp_table_to_cia_and_python_decomp,
    )


@functools.cache
def _program_class_checked_once():
    """ExportedProgram, not verified again when it is made from a snapshot: the verifier imports
    sympy (0.3-0.4 s of an mcu build after android, which nothing else in it imports), and the
    program was verified when its .pt2 was loaded. `validate()` called later verifies as usual."""
    from torch.export.exported_program import ExportedProgram

    class SnapshotExportedProgram(ExportedProgram):
        _made = False

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)  # its last step is validate()
            self._made = True

        def validate(self):
            if self._made:
                super().validate()

    return SnapshotExportedProgram


def snapshot_internals(*, gated: bool = True) -> SimpleNamespace:
    """What a program snapshot is written and read with: torch's pytree spec format, the IR's
    verifier by dialect, a fake-tensor mode like the loader's, and the ExportedProgram class made
    without a second verification. Raises Unavailable off the verified releases. gated=False:
    for a program a snapshot already made (its meta values need fake ones), whatever the gate."""
    if gated and not _fast("program snapshot"):
        raise Unavailable("torch's snapshot internals are gated off")
    try:
        import torch.utils._pytree as pytree
        from torch._export.verifier import load_verifier
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
    except ImportError as exc:
        fell_back("program snapshot", repr(exc))
        raise Unavailable(repr(exc)) from exc

    def fake_tensor_mode():
        return FakeTensorMode(
            allow_fallback_kernels=False, allow_non_fake_inputs=True, shape_env=ShapeEnv(assume_static_by_default=True)
        )

    return SimpleNamespace(
        pytree=pytree,
        load_verifier=load_verifier,
        fake_tensor_mode=fake_tensor_mode,
        program_class=_program_class_checked_once(),
    )
