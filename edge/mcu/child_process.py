"""Running one tpuedge function in a child Python process, for TFLite-Micro work that can abort the
process it runs in (some kernels SIGABRT instead of refusing a model, and the host interpreter
crashes outright at some arena sizes): the parent survives and reads what the child wrote.

The parent and the child share a temporary folder: the parent writes its inputs there, the child
(`entry`, a function taking no arguments and reading `sys.argv[1:]`) writes its answer there. The
child's stdout is dropped; its stderr comes back for the parent's message.

Starting an interpreter that imports numpy and TFLite-Micro takes ~0.2 s, and an mcu build starts
two (the int8 search's worker, the arena probe) at points where the build can do nothing else
meanwhile. `spare_children` starts them ahead, on the machine's other core while the build
converts and calibrates: each spare imports what it is told and waits for `spawn` to hand it an
entry on its stdin. Without a spare, `spawn` starts a fresh one; either way the child runs the
same code with the same environment.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["child_folder", "run_child", "spawn", "spare_children", "Child", "spare"]

_SPARE_ENTRY = "tpuedge.edge.mcu.child_process.spare"


@contextmanager
def child_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder for one parent and its children, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)


class Child:
    """A child interpreter: `proc` with stdin and stdout pipes, stderr in a temporary file."""

    def __init__(self, preload: Sequence[str]):
        self.stderr_file = tempfile.TemporaryFile()
        module, _, function = _SPARE_ENTRY.rpartition(".")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from {module} import {function}; {function}()", *preload],
            env=_child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
        )

    def start(self, entry: str, args: Sequence[str]) -> bool:
        """Hand the waiting child `entry` and its argv; False when it is gone (killed, or it failed to start)."""
        try:
            self.proc.stdin.write(json.dumps({"entry": entry, "args": list(args)}).encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except OSError:  # BrokenPipeError: it ended before it was needed
            self.discard()
            return False

    def stderr_text(self, tail: int | None = None) -> str:
        self.stderr_file.seek(0, os.SEEK_END)
        size = self.stderr_file.tell()
        self.stderr_file.seek(0 if tail is None else max(0, size - tail))
        return self.stderr_file.read().decode("utf-8", errors="replace")

    def discard(self) -> None:
        """Close the child's pipes (one with no entry yet, or a worker between requests, reads
        end-of-file and ends), wait for it, and close its stderr file."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc.wait()
        self.stderr_file.close()


class _SpareBlock:
    """An open `spare_children` block: the child waiting for it and how many more it wants."""

    def __init__(self, count: int, preload: Sequence[str]):
        self.preload = tuple(preload)
        self.left = count - 1
        self.waiting: Child | None = Child(self.preload)

    def take(self) -> Child | None:
        child, self.waiting = self.waiting, None
        # one waiting at a time: two starting at once took from the busy parent what they saved
        if child is not None and self.left > 0:
            self.left -= 1
            self.waiting = Child(self.preload)
        return child


_blocks: list[_SpareBlock] = []
_blocks_lock = threading.Lock()


@contextmanager
def spare_children(count: int, preload: Sequence[str] = ()) -> Iterator[None]:
    """The block will run `count` children (`spawn`): each is started ahead, importing `preload`,
    one waiting at a time, the next started when one is taken; one left when the block ends is
    ended (an idle interpreter is not left behind in a long-lived process)."""
    block = _SpareBlock(count, preload)
    with _blocks_lock:
        _blocks.append(block)
    try:
        yield
    finally:
        with _blocks_lock:
            _blocks.remove(block)
            left, block.waiting = block.waiting, None
        if left is not None:
            left.discard()


def _take_spare() -> Child | None:
    with _blocks_lock:
        return next((child for block in reversed(_blocks) if (child := block.take()) is not None), None)


def spawn(entry: str, *args: str) -> Child:
    """`entry` ("package.module.function") running in a child with argv = args: a spare when one
    waits, else a fresh interpreter. Its stdin stays open for the caller (closed: end-of-file)."""
    while True:
        child = _take_spare() or Child(())
        if child.start(entry, args):
            return child


def run_child(entry: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """Run `entry` ("package.module.function") in a child with argv = folder, *args, to its end;
    returns the finished process (a negative returncode: killed by that signal), its stderr as text."""
    child = spawn(entry, str(folder), *args)
    child.proc.communicate()  # closes its stdin; what it printed to stdout is dropped
    stderr = child.stderr_text()
    child.stderr_file.close()
    return subprocess.CompletedProcess(child.proc.args, child.proc.returncode, None, stderr)


def spare() -> None:
    """A child's main: import the modules named in argv, wait for one request line on stdin
    ({"entry", "args"}), run that entry with argv = args. End-of-file first: not needed.

    A child that ends without an exception skips the interpreter's teardown (~25 ms with numpy
    and TFLite-Micro loaded, which its parent waits for); its answer is written by then (the
    entry's files closed, stdout and stderr flushed here). An exception still ends it the usual
    way: the traceback on stderr, exit code 1."""
    for module in sys.argv[1:]:
        importlib.import_module(module)
    line = sys.stdin.buffer.readline()  # the rest of stdin, if any, is the entry's
    if line:
        request = json.loads(line)
        sys.argv = [sys.argv[0], *request["args"]]
        module, _, function = request["entry"].rpartition(".")
        getattr(importlib.import_module(module), function)()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _child_env() -> dict[str, str]:
    # the tpuedge this process runs (a checkout or an install) is the one the child imports
    root = str(Path(sys.modules["tpuedge"].__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


@atexit.register
def _discard_spares() -> None:
    with _blocks_lock:
        left = [block.waiting for block in _blocks if block.waiting is not None]
        for block in _blocks:
            block.waiting, block.left = None, 0
    for child in left:
        child.discard()
