"""pyproject.toml says what the code needs: every third-party import is a declared dependency,
and the Python floor is one the code and its dependencies really run on."""

from __future__ import annotations

import ast
import os
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARY_FOLDERS = ("shared_ir", "cloud", "edge", "quantize", "tpuedge")
# Imported only where that tool is what runs the code: the pytest plugin is loaded by pytest.
RUN_BY_THEIR_TOOL = {"pytest": {"tpuedge/testing/plugin.py"}}


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imports(stdlib: bool = False) -> dict[str, set[str]]:
    """Top-level module -> the library files importing it (third-party only, unless stdlib)."""
    found: dict[str, set[str]] = {}
    for folder in LIBRARY_FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top != "tpuedge" and (stdlib or top not in sys.stdlib_module_names):
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    declared = {_dist_name(r) for r in _project()["dependencies"]}
    owners = metadata.packages_distributions()
    missing = {}
    for module, files in sorted(_imports().items()):
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [module])}
        if dists & declared or files <= RUN_BY_THEIR_TOOL.get(module, set()):
            continue
        missing[module] = sorted(files)
    assert not missing, f"imported but not in [project].dependencies: {missing}"


def _floor(specifier: str) -> tuple[int, int]:
    match = re.search(r">=\s*(\d+)\.(\d+)", specifier or "")
    return (int(match[1]), int(match[2])) if match else (3, 0)


def test_the_python_floor_is_one_the_dependencies_and_the_code_run_on():
    floor = _floor(_project()["requires-python"])
    for requirement in _project()["dependencies"]:
        dist = metadata.metadata(_dist_name(requirement))
        needs = _floor(dist.get("Requires-Python", ""))
        assert needs <= floor, f"{dist['Name']} {dist['Version']} needs Python {needs}, requires-python says {floor}"
    # stdlib modules the code imports exist at the floor
    added = {"tomllib": (3, 11)}
    for module, files in _imports(stdlib=True).items():
        if module in added:
            assert added[module] <= floor, f"{sorted(files)} import {module}, new in Python {added[module]}"
    for folder in LIBRARY_FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            ast.parse(path.read_text(), feature_version=floor)


LAYOUT = ("pyproject.toml", "setup.py", "README.md", *LIBRARY_FOLDERS)


def test_a_wheel_holds_every_module_under_the_tpuedge_namespace(tmp_path):
    """The package list is discovered: every module of the four folders lands under tpuedge/,
    a new subpackage included, and nothing installs as a top-level edge/cloud/... package."""
    import shutil
    import subprocess
    import zipfile

    source = tmp_path / "src"
    source.mkdir()
    for name in LAYOUT:  # a copy, so the build's scratch folders stay out of the checkout
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, source / name)
    new_subpackage = source / "shared_ir" / "passes" / "brand_new"
    new_subpackage.mkdir()
    (new_subpackage / "__init__.py").write_text("")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("tpuedge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {n.split("/")[0] for n in names} == {"tpuedge", f"tpuedge-{_project()['version']}.dist-info"}
    folders = {
        "tpuedge": "tpuedge",
        "shared_ir": "tpuedge/shared_ir",
        "cloud": "tpuedge/cloud",
        "edge": "tpuedge/edge",
        "quantize": "tpuedge/quantize",
    }
    expected = {
        f"{folders[folder]}/{path.relative_to(source / folder).as_posix()}"
        for folder in LIBRARY_FOLDERS
        for path in (source / folder).rglob("*.py")
    }
    assert expected - names == set()
    assert "tpuedge/shared_ir/passes/brand_new/__init__.py" in names
    assert "tpuedge/edge/mcu/data/tflm_ops.json" in names
    # The build cache keys on a digest of tpuedge's source: the installed copy and the checkout it
    # came from must agree, or a CLI run from the checkout and one from the install miss each
    # other's entries (CI, a non-editable install, once failed test_cache_builds this way).
    zipfile.ZipFile(wheel).extractall(tmp_path / "installed")
    digest = (
        "from tpuedge.shared_ir.cache_keys import _source_digest as d; import tpuedge; print(tpuedge.__file__, d())"
    )

    def digest_from(path):
        out = subprocess.run(
            [sys.executable, "-c", digest],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(path)},
        )
        assert out.returncode == 0, out.stderr[-2000:]
        where, value = out.stdout.split()
        assert where.startswith(str(path)), where  # each run imports the copy it was pointed at
        return value

    assert digest_from(tmp_path / "installed") == digest_from(source)
