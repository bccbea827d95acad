"""JAX's process-wide switches as tpuedge touches them, verified on jax 0.10.2.

- `x64_switch_kept()`: litert-torch's import runs `jax.config.update("jax_enable_x64", True)`
  for the whole process (a user training on the cloud backend in another thread would see int64
  where it had int32). Fast path: while the block runs, `jax.config.update` of that one flag
  does nothing for the block's own thread (an instance attribute that shadows the method; every
  other update, and every other thread's, goes through). Public route (another jax, or
  `public_api_only()`): the import switches it, and `jax.config.update` puts it back at once
  after, under a lock; a thread that reads the flag during the import can see it on.
- `process_config(settings)`: options with no thread-local form (the MLIR location options of a
  StableHLO export), set through `jax.config.update` and put back after; blocks are serialized
  by a lock, and a jax call in another thread meanwhile sees them set.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from tpuedge.shared_ir.upstream_gate import ScopedPatch, fell_back, verified

__all__ = ["VERIFIED_JAX", "process_config", "x64_switch_kept"]

VERIFIED_JAX = ("0.10.2",)
X64 = "jax_enable_x64"
_X64_PATCH = ScopedPatch()
_X64_LOCK = threading.Lock()
_CONFIG_LOCK = threading.RLock()


def _x64_ignored(patch: ScopedPatch):
    import jax

    update = jax.config.update

    def ours(name, value):
        return None if name == X64 else update(name, value)

    jax.config.update = patch.route(ours, update)  # an instance attribute: shadows the method

    def undo() -> None:
        del jax.config.update

    return undo


@contextlib.contextmanager
def x64_switch_kept() -> Iterator[None]:
    """JAX's process-wide x64 flag is what it was before the block once the block is done, and,
    on the verified jax, all the while too."""
    import jax

    with _X64_LOCK:
        before = bool(jax.enable_x64.get_global())
        stack = contextlib.ExitStack()
        ignored = False
        if verified("jax", VERIFIED_JAX):
            ignored = _X64_PATCH.enter_or_fall_back(
                stack, "x64 switch ignored on import", _x64_ignored, (AttributeError, TypeError)
            )
        else:
            fell_back("x64 switch ignored on import", "jax release not verified, or public API only")
        with stack:
            yield
        # only on the public route: otherwise a change is another thread's own, and stays
        if not ignored and bool(jax.enable_x64.get_global()) != before:
            jax.config.update(X64, before)


@contextlib.contextmanager
def process_config(settings: dict) -> Iterator[None]:
    """JAX config `settings` for the block's length, process-wide (serialized), put back after."""
    import jax

    with _CONFIG_LOCK:
        previous = {key: getattr(jax.config, key) for key in settings}
        for key, value in settings.items():
            jax.config.update(key, value)
        try:
            yield
        finally:
            for key, value in previous.items():
                jax.config.update(key, value)
