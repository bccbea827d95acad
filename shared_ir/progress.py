"""Progress of long build stages on a terminal: the stage, step k of n, elapsed time.

    with stage_progress("int8 search", total=13) as step:
        for recipe in recipes:
            step(f"recipe {recipe}")      # k-1 of n done, now working on this one
            ...

One live display (rich, on stderr) for the whole process: a stage started inside another
shows as a second row. It draws only when stderr is a terminal, so logs, pipes and CI output
stay clean; TPUEDGE_PROGRESS=0 turns it off on a terminal too, TPUEDGE_PROGRESS=1 draws even
when stderr is not a terminal (for a demo recording or a test). Rows vanish when done: the
build's report says what happened, the display only says that something is happening.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["stage_progress", "progress_enabled"]

_LOCK = threading.Lock()
_LIVE: dict[str, Any] = {"progress": None, "depth": 0}


def progress_enabled() -> bool:
    forced = os.environ.get("TPUEDGE_PROGRESS")
    if forced is not None:
        return forced == "1"
    return sys.stderr.isatty()


def _terminal_stream():
    """A private copy of the process's stderr fd: tool calls inside a stage hold fd 2 and swap
    sys.stderr (edge/tool_output.py); the display must neither land in their held logs nor
    write through their stand-ins."""
    try:
        return os.fdopen(os.dup(sys.__stderr__.fileno()), "w", buffering=1, errors="backslashreplace")
    except (AttributeError, OSError, ValueError):  # no real fd (embedded interpreters, notebooks)
        return None


def _start() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    stream = _terminal_stream()
    _LIVE["stream"] = stream
    console = Console(file=stream or sys.__stderr__, force_terminal=os.environ.get("TPUEDGE_PROGRESS") == "1" or None)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[label]}"),
        TimeElapsedColumn(),
    )
    # no redirect of sys.stdout/sys.stderr: the tool calls swap those themselves
    progress = Progress(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
    progress.start()
    return progress


@contextmanager
def stage_progress(description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A row "description [bar] k/n label elapsed" while the block runs; yields step(label="").
    total=None: a spinner without a bar (the number of steps is not known)."""
    if not progress_enabled() or threading.current_thread() is not threading.main_thread():
        yield lambda label="": None
        return
    with _LOCK:
        if _LIVE["progress"] is None:
            _LIVE["progress"] = _start()
        _LIVE["depth"] += 1
        progress = _LIVE["progress"]
        task = progress.add_task(description, total=total, label="")
        progress.refresh()  # drawn now, not at the next tick: a short stage shows too

    started, alive = 0, True

    def step(label: str = "") -> None:
        nonlocal started
        if alive:  # a step after the block is harmless, not a KeyError from a removed row
            progress.update(task, completed=started, label=label)
            progress.refresh()
        started += 1

    try:
        yield step
    finally:
        alive = False
        with _LOCK:
            progress.remove_task(task)
            _LIVE["depth"] -= 1
            if _LIVE["depth"] == 0:
                progress.stop()
                _LIVE["progress"] = None
                if _LIVE.get("stream") is not None:
                    _LIVE.pop("stream").close()
