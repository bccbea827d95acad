"""Bytecode for the checkout's tpuedge, written before a benchmark times builds from it.

An installed tpuedge has its bytecode (pip compiles on install), and a checkout writes its own
on first import, unless PYTHONDONTWRITEBYTECODE is set, as it was on the machine these benches
ran on: there every timed build process compiled tpuedge's modules from source (129 of them in
an mcu build, ~0.1 s) while the peer's packages, in site-packages, came with theirs. Writing it
once here (compileall writes whatever that variable says) times tpuedge as a user runs it.
"""

from __future__ import annotations

import compileall
import re
import tomllib
from pathlib import Path

__all__ = ["compile_checkout"]


def compile_checkout(root: Path) -> None:
    """Bytecode (__pycache__, ignored by git) for every folder pyproject.toml maps into the
    tpuedge package, and for bench/ (which both sides of a benchmark import)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    folders = set(config["tool"]["setuptools"]["package-dir"].values()) | {"bench"}
    for folder in sorted(folders):
        if not compileall.compile_dir(root / folder, quiet=1, rx=_RESULTS):
            raise SystemExit(f"could not compile {root / folder} to bytecode")


# compileall's `rx`: leave out bench/results (vendored zoo packages, run outputs)
_RESULTS = re.compile(r"[/\\]bench[/\\]results[/\\]")
