"""The docs say what the code does: every shell command on the target pages runs here, and no
file cites notes that don't ship with the repo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".json", ".cc", ".h", ""}
SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", "results", ".ruff_cache", ".pytest_cache"}
# Notes kept outside the repo (the maintainers' stack and design notes) and machine paths.
OUTSIDE = re.compile(
    "|".join([r"\bSTACK" + r"\.md\b", r"\bARCHITECTURE" + r"\.md\b", r"/wor" + r"k/", r"notes/" + r"PREAMBLE"])
)


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


# ---- every shell command on the target pages runs ------------------------------------------
DOCS = REPO / "docs"
PAGES = ("android.md", "mcu.md", "cloud-tpu.md", "training.md", "quantization.md", "verify.md")
# A page that works on another page's outputs says so in its text; its commands run after those.
NEEDS = {"verify.md": ("mcu.md", "quantization.md")}
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def bash_blocks(page: str) -> list[str]:
    return _FENCE.findall((DOCS / page).read_text())


class _DocsRun:
    """One folder where the pages' commands run in order, as a reader at the repo root would
    (`examples/` linked in); each page runs once, after the pages it needs."""

    def __init__(self, folder: Path):
        import os
        import sys

        self.folder = folder
        (folder / "examples").symlink_to(REPO / "examples")
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        self.done: dict[str, list] = {}

    def run(self, page: str) -> list:
        import subprocess

        if page not in self.done:
            for needed in NEEDS.get(page, ()):
                self.run(needed)
            self.done[page] = [
                subprocess.run(
                    ["bash", "-e", "-o", "pipefail", "-c", block],
                    cwd=self.folder,
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                for block in bash_blocks(page)
            ]
        return self.done[page]


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory):
    return _DocsRun(tmp_path_factory.mktemp("docs"))


def test_every_target_page_exists_and_has_commands():
    for page in PAGES:
        assert bash_blocks(page), f"docs/{page} has no ```bash block"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_the_commands_on_the_page_run(docs_run, page):
    for block, proc in zip(bash_blocks(page), docs_run.run(page)):
        assert proc.returncode == 0, (
            f"docs/{page}:\n{block}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_what_the_pages_promise_is_on_disk(docs_run):
    for page in PAGES:
        docs_run.run(page)
    folder = docs_run.folder
    assert sorted(p.name for p in (folder / "build/digits/mcu").iterdir()) == [
        "manifest.json",
        "model.tflite",
        "model_data.cc",
        "model_data.h",
        "op_resolver.h",
    ]
    assert {"model.stablehlo.mlir", "model.jaxexport", "model.safetensors", "manifest.json"} <= {
        p.name for p in (folder / "build/mlp/cloud-tpu").iterdir()
    }
    import json

    result = json.loads((folder / "verify.json").read_text())
    assert result  # verify wrote its JSON for CI


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_in_the_readme_and_docs_names_a_file_that_ships():
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((REPO / "examples").rglob("README.md"))]
    broken = [
        f"{page.relative_to(REPO)}: {target}"
        for page in pages
        for target in _LINK.findall(page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert not broken, "\n".join(broken)


# ---- history belongs in git: no commit hashes or issue numbers on the pages -----------------
# A commit hash: 7 to 40 hex digits with a letter and a digit among them, standing alone (not in a
# word, a path, a 0x constant or a 64-digit sha256). Fenced blocks show program output (an IR
# fingerprint is hex too) and are left out.
_COMMIT = re.compile(r"(?<![\w./#-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
_ISSUE = re.compile(r"\bissues? ?#?\d+|(?<![\w&/])#\d{2,}\b", re.IGNORECASE)
_ANY_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def history_references(text: str) -> list[str]:
    """The commit hashes and issue numbers in a page's prose."""
    prose = _ANY_FENCE.sub("", text)
    return [m.group(0) for line in prose.splitlines() for m in (*_COMMIT.finditer(line), *_ISSUE.finditer(line))]


def test_history_references_are_found_and_look_alikes_are_not():
    short, longer = "1166" + "e7a", "5860" + "db3b"  # built here, so the repo's own grep stays clean
    assert history_references(f"fixed in `{short}`, at {longer} and issue 12; see #123") == [
        short,
        longer,
        "issue 12",
        "#123",
    ]
    sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b852b855"
    fenced = "```\nIR " + "a16f" + "3883065b\n```\n"
    clean = f"0x7fffffff, 1997379, deadbeef, decade, {sha256}, model_v1a2b3c4d, anchor (#--quantize)\n{fenced}"
    assert history_references(clean) == []


def test_no_page_cites_a_commit_or_an_issue():
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md")), *sorted((REPO / "examples").rglob("*.md"))]
    found = [f"{page.relative_to(REPO)}: {ref}" for page in pages for ref in history_references(page.read_text())]
    assert not found, "\n".join(found)


# ---- the zoo's page is rendered from its committed run -------------------------------------
def test_the_zoo_page_is_what_its_committed_run_renders():
    import json
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        import zoo_docs
    finally:
        sys.path.remove(str(REPO / "bench"))
    run = json.loads(zoo_docs.DATA.read_text())
    assert zoo_docs.DOC.read_text() == zoo_docs.render(run), "run `python bench/zoo.py --write-docs`"
    page = zoo_docs.DOC.read_text()
    for model in {row["model"] for row in run["rows"]}:
        assert f"`{model}`" in page  # the page says which models the run covered


def test_the_readme_is_short_and_opens_with_the_two_set_up_commands():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "README.md is read first: keep it to 150 lines, details in docs/"
    first_block = _FENCE.search(readme).group(1).splitlines()
    assert len(first_block) == 2, first_block
    assert first_block[0].startswith("python3 -m venv .venv && .venv/bin/pip install -c constraints.txt '.[tpu,test]'")
    assert first_block[1] == (
        "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt '.[tpu,test,zoo]' && .venv/bin/pytest -q"
    )
