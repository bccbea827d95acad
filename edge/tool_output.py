"""Route what the edge toolchain prints (converter, quantizer, interpreters) like tpuedge's own logs.

litert-converter, ai-edge-quantizer and the LiteRT interpreter write start-up and progress lines
to stderr, some from Python (progress bars, warnings) and some from C++ straight to fd 2
("All log messages before absl::InitializeLog()", oneDNN notices, "Created TensorFlow Lite
XNNPACK delegate"). `held_tool_output` holds both back, so the console carries only tpuedge's
report, and never throws them away (Python-level writes of OTHER threads pass through; fd 2 is
one per process, so native lines any thread writes during the block are held with the tool's):
  - verbose (TPUEDGE_VERBOSE=1, `--verbose`) prints them as soon as the block ends;
  - otherwise they go to the capture around the build (shared_ir/held_logs.py), which keeps
    them in the build's log and shows them when the build fails;
  - when the block raises, they are attached to the exception (`exc.tool_output`, and a note
    that Python prints under the traceback), so a failure shows what the tool said.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from collections.abc import Iterator

from tpuedge.shared_ir.held_logs import keep_held
from tpuedge.shared_ir.native_stderr import held_native_stderr

__all__ = ["held_tool_output", "tail"]


class _ThisThreadOnly(io.TextIOBase):
    """sys.stderr while a tool runs: this thread's writes go to `held`, other threads' (a user's
    training loop beside an edge build) still reach the stream they wrote to before."""

    def __init__(self, held: io.StringIO, passthrough, thread: int):
        self._held, self._passthrough, self._thread = held, passthrough, thread

    def _target(self):
        if threading.get_ident() == self._thread:
            return self._held
        if self._passthrough is None or self._passthrough.closed:  # a late write after the block
            return sys.__stderr__
        return self._passthrough

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def writable(self) -> bool:
        return True


def _console_copy():
    try:
        return os.fdopen(os.dup(sys.__stderr__.fileno()), "w", buffering=1, errors="backslashreplace")
    except (AttributeError, OSError, ValueError):  # no real fd (embedded interpreters, notebooks)
        return None


def tail(text: str, lines: int = 20) -> str:
    """The last `lines` non-empty lines of a tool's output (what matters when it failed)."""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


@contextlib.contextmanager
def held_tool_output(tool: str) -> Iterator[list[str]]:
    """Hold `tool`'s stderr (Python and native) inside the block; the yielded list gets the text."""
    captured: list[str] = []
    python_err = io.StringIO()
    error: BaseException | None = None
    outer = sys.stderr
    # Other threads writing to the process's own stderr would land in the held fd 2: give them
    # a copy of the console's fd, taken before the redirect.
    console = _console_copy() if outer is sys.__stderr__ else None
    with contextlib.ExitStack() as stack:
        if console is not None:
            stack.callback(console.close)
        with (
            held_native_stderr(keep=False) as native,
            contextlib.redirect_stderr(_ThisThreadOnly(python_err, console or outer, threading.get_ident())),
        ):
            try:
                yield captured
            except BaseException as exc:  # re-raised below, with the output attached
                error = exc
            finally:
                # handlers that kept the real stream (absl, logging) buffer in Python: flush them
                # into the held fd before it is restored
                for stream in {id(s): s for s in (outer, sys.__stderr__) if s is not None}.values():
                    with contextlib.suppress(Exception):
                        stream.flush()
    text = python_err.getvalue() + native[0]
    captured.append(text)
    keep_held(text)
    if error is not None:
        if text.strip() and not isinstance(error, (KeyboardInterrupt, SystemExit)):
            error.tool_output = text  # type: ignore[attr-defined]
            if hasattr(error, "add_note"):
                error.add_note(f"{tool} printed:\n{tail(text)}")
        raise error
