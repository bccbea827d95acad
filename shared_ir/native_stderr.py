"""Hold back what native code (C++ runtimes, libtpu) writes to the process's fd 2.

Python's `redirect_stderr` can't see it; the runtimes print allocation errors and start-up
warnings there. The text is kept, so a caller can still show it when something failed, and
handed to the capture around the run (shared_ir/held_logs.py): a build's log keeps it, and
verbose shows it when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from tpuedge.shared_ir.held_logs import keep_held

__all__ = ["held_native_stderr"]


@contextlib.contextmanager
def held_native_stderr(*, keep: bool = True) -> Iterator[list[str]]:
    """Redirect fd 2 inside the block; afterwards the yielded list holds the captured text.

    keep=False: the caller hands the text on itself (edge/tool_output.py joins it with the
    Python-level stderr it held)."""
    captured: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))
            if keep:
                keep_held(captured[0])
