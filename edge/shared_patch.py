"""A process-wide patch of a library's hook, installed by the first block that needs it and
undone by the last one to leave.

A lowering swaps a few of torch's and litert-torch's module-level hooks for ours (direct
lowerings in litert-torch's registry, its decomposition entry point, torch's CIA op walk).
Builds may run in threads side by side: they share one installation, counted under a lock, and
whatever the library does outside every block (a user's own `litert_torch.convert`) is left as
it was.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["SharedPatch"]


class SharedPatch:
    """`with patch.held(install):` — `install()` patches and returns what undoes it; it runs on the
    first entry, and the undo on the last exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._undo: Callable[[], None] | None = None

    @contextlib.contextmanager
    def held(self, install: Callable[[], Callable[[], None]]) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._undo = install()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    undo, self._undo = self._undo, None
                    undo()
