"""Use litert-torch without letting it change JAX's process-wide x64 mode.

Importing litert-torch runs `jax.config.update("jax_enable_x64", True)` (its jax bridge needs
64-bit types while lowering). Left alone, that flips the cloud backend of the same process
from int32 to int64 integers, so its artifacts and checks would depend on whether an edge
build ran first. Every litert-torch import and call in tpuedge goes through `litert_session()`,
which gives litert-torch x64 for the duration and then puts back the mode the user had.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tpuedge.edge.tool_output import held_tool_output

__all__ = ["litert_session"]


@contextlib.contextmanager
def litert_session() -> Iterator[None]:
    import jax

    before = bool(jax.config.jax_enable_x64)
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # our CLI reports progress itself
    jax.config.update("jax_enable_x64", True)
    try:
        # litert-converter's C++ start-up lines (absl, oneDNN) and litert-torch's warnings:
        # shown with TPUEDGE_VERBOSE=1 or when the conversion fails
        with held_tool_output("litert-torch"):
            yield
    finally:
        jax.config.update("jax_enable_x64", before)
