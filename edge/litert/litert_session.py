"""Use litert-torch without ever changing JAX's process-wide x64 mode.

litert-torch's jax bridge needs 64-bit types while it lowers, and its import runs
`jax.config.update("jax_enable_x64", True)`. Flipping that process-wide switch, even for the
length of one build, is unsafe: a user training on the cloud backend in another thread of the
same process would see int64 where it had int32 (jax canonicalizes every call's arguments by
that flag), retrace, and produce different artifacts. So `litert_session()`:
  - gives litert-torch x64 with `jax.enable_x64(True)`, JAX's thread-local override: only the
    thread running the edge build sees it;
  - imports litert-torch once, under a lock, with its import-time switch of the process-wide
    flag kept from taking effect (shared_ir/jax_compat.py's `x64_switch_kept`).
Every litert-torch import and call in tpuedge goes through `litert_session()`.

The jax bridge's `jax.jit(...).lower()` asks JAX for its default device, and the first such call
starts every backend JAX finds: with libtpu installed (the `tpu` extra) that loads the TPU runtime,
about 110 MB of resident memory, into a process that only wanted a float model; on a TPU VM it
would lower for the TPU. While the session runs, the thread's default device is a CPU device of a
client of our own (4 MB, made once): the lowering is the CPU one on every host, and JAX's own
backends stay as the user left them (`jax.default_device` is thread-local, like x64).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from tpuedge.edge.tool_output import held_tool_output

__all__ = ["litert_session"]

_IMPORT_LOCK = threading.Lock()
_DEVICE_LOCK = threading.Lock()
_lowering_cpu = []  # [device] once made; [None] where this jax cannot make a client of its own


def _import_litert_torch() -> None:
    """Import litert-torch (and its jax bridge) without its process-wide x64 switch."""
    if "litert_torch" in sys.modules:
        return
    from tpuedge.shared_ir.stage_times import timed

    with timed("import litert-torch and jax"):
        _import_once()


def _import_once() -> None:
    from tpuedge.edge.litert.litert_torch_compat import import_litert_torch

    with _IMPORT_LOCK:
        if "litert_torch" not in sys.modules:
            import_litert_torch()


def _lowering_device():
    """A CPU device of tpuedge's own XLA client, for lowering only (nothing runs on it); None
    where this jaxlib has no way to make one (JAX's default device is then used). The client is a
    single-process one: in a multi-host job (`jax.distributed`) JAX's own CPU client joins the
    job's topology, this one must not."""
    with _DEVICE_LOCK:
        if not _lowering_cpu:
            try:
                from jaxlib import xla_client  # jax's own call (xla_bridge.make_cpu_client) adds the distributed job

                _lowering_cpu.append(xla_client.make_cpu_client(num_devices=1).local_devices()[0])
            except (ImportError, AttributeError, TypeError):
                _lowering_cpu.append(None)
        return _lowering_cpu[0]


@contextlib.contextmanager
def litert_session() -> Iterator[None]:
    import jax

    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # our CLI reports progress itself
    # litert-converter's C++ start-up lines (absl, oneDNN) and litert-torch's warnings: shown
    # with TPUEDGE_VERBOSE=1 or when the conversion fails
    with held_tool_output("litert-torch"):
        _import_litert_torch()
        device = _lowering_device()
        with jax.enable_x64(True), jax.default_device(device) if device is not None else contextlib.nullcontext():
            yield
