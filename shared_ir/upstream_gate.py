"""Version gates for upstream internals, the switch that turns them all off, and scoped patches.

A fast path that reads a private symbol of torch, litert-torch, ai-edge-quantizer or jax, or that
patches one of their functions, lives in that upstream's compatibility module
(`shared_ir/torch_compat.py`, `shared_ir/jax_compat.py`, `edge/litert/litert_torch_compat.py`,
`edge/litert/quantizer_compat.py`) and runs only where `verified()` says the installed release is one it
was checked on. Anywhere else, or where its private call raises, the module takes a public-API
route that gives the same artifact, only slower: a new upstream release costs speed, never
correctness. `TPUEDGE_PUBLIC_API_ONLY=1` in the environment, or `public_api_only()` around a
block, fails every gate (the tests build with both and compare the bytes).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator

__all__ = [
    "PUBLIC_API_ONLY_ENV",
    "ScopedPatch",
    "Unavailable",
    "fallbacks_taken",
    "fell_back",
    "public_api_only",
    "verified",
]

PUBLIC_API_ONLY_ENV = "TPUEDGE_PUBLIC_API_ONLY"
_LOG = logging.getLogger("tpuedge.upstream")
_STATE_LOCK = threading.Lock()
_forced = 0  # blocks of public_api_only() open, in any thread
_taken: dict[str, str] = {}  # fast path -> why its fallback ran (first time)
_watching: list[set[str]] = []  # one per open public_api_only() block: the fast paths that fell back in it


class Unavailable(Exception):
    """A fast path's private piece is gated off or missing: take the public route."""


@contextlib.contextmanager
def public_api_only() -> Iterator[set[str]]:
    """Every gate fails while the block runs, in every thread (a process-wide switch: it exists
    for tests and for ruling a fast path out when a build looks wrong). Gives the set of the fast
    paths that took their public route meanwhile, filled as they do."""
    global _forced
    taken: set[str] = set()
    with _STATE_LOCK:
        _forced += 1
        _watching.append(taken)
    try:
        yield taken
    finally:
        with _STATE_LOCK:
            _forced -= 1
            _watching.remove(taken)


@functools.cache
def _installed(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def verified(distribution: str, releases: tuple[str, ...]) -> bool:
    """Whether the installed `distribution` is one of `releases` ("2.13" takes 2.13.0 and
    2.13.1+cpu; "0.10.2" takes only that one), and no switch turned the gates off."""
    if _forced or os.environ.get(PUBLIC_API_ONLY_ENV, "") not in ("", "0"):
        return False
    version = _installed(distribution)
    if version is None:
        return False
    version = version.split("+")[0]
    return any(version == r or version.startswith(r + ".") for r in releases)


def fell_back(fast_path: str, reason: str) -> None:
    """Record (and log once, at INFO) that `fast_path` took its public route."""
    with _STATE_LOCK:
        first = fast_path not in _taken
        if first:
            _taken[fast_path] = reason
        for taken in _watching:
            taken.add(fast_path)
    if first:
        _LOG.info("%s: the public-API route (%s)", fast_path, reason)


def fallbacks_taken() -> dict[str, str]:
    """Each fast path that took its public route in this process, with its first reason."""
    with _STATE_LOCK:
        return dict(_taken)


class ScopedPatch:
    """A library function replaced for the threads inside `held()` only.

    `install(patch)` swaps the library's function for `patch.route(ours, original)` and returns
    what puts the original back. The first block to enter installs it and the last to leave undoes
    it, under a lock, so concurrent builds share one installation. While it is installed, a call
    from a thread outside every block (a user's own torch.export or litert-torch call) reaches the
    original; so does a thread a block starts itself, which costs it the fast path, nothing else.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: collections.Counter = collections.Counter()
        self._undo: Callable[[], None] | None = None

    def active(self) -> bool:
        return self._threads[threading.get_ident()] > 0

    def route(self, ours: Callable, original: Callable) -> Callable:
        def routed(*args, **kwargs):
            return (ours if self.active() else original)(*args, **kwargs)

        routed.__wrapped__ = original
        return routed

    def enter_or_fall_back(
        self,
        stack: contextlib.ExitStack,
        fast_path: str,
        install: Callable[["ScopedPatch"], Callable[[], None]],
        errors: tuple[type[BaseException], ...] = (ImportError, AttributeError),
    ) -> bool:
        """`held(install)` entered into `stack`; when `install` raises one of `errors`, nothing
        changed and the fast path's public route is taken (recorded by `fell_back`). True: held."""
        try:
            stack.enter_context(self.held(install))
        except errors as exc:
            fell_back(fast_path, repr(exc))
            return False
        return True

    @contextlib.contextmanager
    def held(self, install: Callable[["ScopedPatch"], Callable[[], None]]) -> Iterator[None]:
        """Raises what `install` raises, before anything changed (the caller's public route)."""
        me = threading.get_ident()
        with self._lock:
            if not self._threads:
                self._undo = install(self)
            self._threads[me] += 1
        try:
            yield
        finally:
            with self._lock:
                self._threads[me] -= 1
                if self._threads[me] == 0:
                    del self._threads[me]
                if not self._threads:
                    undo, self._undo = self._undo, None
                    undo()
