"""The code passes the project's lint and format check (ruff, configured in pyproject.toml, pinned in
constraints.txt): `ruff check .` and `ruff format --check .` at the repo root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_ruff_finds_nothing():
    proc = _ruff("check", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_code_is_formatted():
    proc = _ruff("format", "--check")
    assert proc.returncode == 0, "run `ruff format .` at the repo root:\n" + proc.stdout + proc.stderr
