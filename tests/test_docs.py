"""The docs say what the code does: every shell command on the target pages runs here, and no
file cites notes that don't ship with the repo."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".json", ".cc", ".h", ""}
SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", "results"}
# Notes kept outside the repo (the maintainers' stack and design notes) and machine paths.
OUTSIDE = re.compile("|".join([r"\bSTACK" + r"\.md\b", r"\bARCHITECTURE" + r"\.md\b", r"/wor" + r"k/", r"notes/" + r"PREAMBLE"]))


def _repo_text_files():
    for path in REPO.rglob("*"):
        if path.is_file() and path.suffix in TEXT_SUFFIXES and not SKIP_DIRS & set(path.relative_to(REPO).parts):
            yield path


def test_nothing_cites_a_file_outside_the_repo():
    cited = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _repo_text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not cited, "\n".join(cited)
