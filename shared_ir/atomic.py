"""Atomic outputs: a failed build leaves no half-written file and never clobbers old outputs."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_write_path", "atomic_output_dir", "write_bytes_atomic"]


@contextlib.contextmanager
def atomic_write_path(path: Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o644)  # mkstemp's file is owner-only; the output is an ordinary file, as the folder's is
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_write_path(path) as tmp:
        tmp.write_bytes(data)


@contextlib.contextmanager
def atomic_output_dir(out_dir: Path) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces `out_dir` whole.

    On failure the staging folder is removed and `out_dir` keeps its previous contents.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".staging", dir=out_dir.parent))
    try:
        yield staging
        old = None
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
            os.rmdir(old)
            os.replace(out_dir, old)
        os.replace(staging, out_dir)
        os.chmod(out_dir, 0o755)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
