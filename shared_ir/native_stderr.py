"""Hold back what native code (C++ runtimes, libtpu) writes to the process's fd 2.

Python's `redirect_stderr` can't see it; the runtimes print allocation errors and start-up
warnings there. The text is kept, so a caller can still show it when something failed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

__all__ = ["held_native_stderr"]


@contextlib.contextmanager
def held_native_stderr() -> Iterator[list[str]]:
    """Redirect fd 2 inside the block; afterwards the yielded list holds the captured text."""
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
