"""Running one tpuedge function in a child Python process, for TFLite-Micro work that can abort the
process it runs in (some kernels SIGABRT instead of refusing a model, and the host interpreter
crashes outright at some arena sizes): the parent survives and reads what the child wrote.

The parent and the child share a temporary folder: the parent writes its inputs there, the child
(`entry`, a function taking no arguments and reading `sys.argv[1:]`) writes its answer there. The
child's stdout is dropped; its stderr comes back for the parent's message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["child_folder", "run_child", "child_command", "child_env"]


@contextmanager
def child_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder for one parent and its children, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)


def run_child(entry: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """Run `entry` ("package.module.function") in a fresh interpreter with argv = folder, *args;
    returns the finished process (a negative returncode: killed by that signal)."""
    return subprocess.run(
        child_command(entry, str(folder), *args), env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def child_command(entry: str, *args: str) -> list[str]:
    """The command line that runs `entry` ("package.module.function") in a fresh interpreter."""
    module, _, function = entry.rpartition(".")
    return [sys.executable, "-c", f"from {module} import {function}; {function}()", *args]


def child_env() -> dict[str, str]:
    # the tpuedge this process runs (a checkout or an install) is the one the child imports
    root = str(Path(sys.modules["tpuedge"].__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
