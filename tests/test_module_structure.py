"""The verify package and the cloud backend stay small and acyclic: modules <= 400 lines with
`__all__`, and no import cycle inside tpuedge/verify (function-level and type-only imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tpuedge/verify", "cloud", "cloud/lowerings")


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.py"))


@pytest.mark.parametrize("folder", PACKAGES)
def test_modules_are_small_and_declare_their_api(folder):
    too_long = {str(p.relative_to(ROOT)): n for p in _modules(folder) if (n := len(p.read_text().splitlines())) > 400}
    assert too_long == {}
    without_all = [str(p.relative_to(ROOT)) for p in _modules(folder) if "__all__" not in p.read_text()]
    assert without_all == []


def _verify_imports(path: Path) -> set[str]:
    """tpuedge.verify modules `path` imports anywhere in its text (type-only and lazy ones too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tpuedge.verify."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("tpuedge.verify.")}
    return found


def test_no_import_cycle_inside_verify():
    graph = {p.stem: _verify_imports(p) for p in _modules("tpuedge/verify") if p.stem != "__init__"}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            assert state.get(target) != "open", "import cycle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_one_float_reference_runner():
    """The float IR runs through `Program.run` (its module built once there): nothing else builds
    the ExportedProgram's module to run it (a re-capture for export passes check_guards=False)."""
    runners = sorted(
        str(p.relative_to(ROOT))
        for folder in ("shared_ir", "edge", "cloud", "quantize", "tpuedge", "bench")
        for p in (ROOT / folder).rglob("*.py")
        if "exported_program.module()" in p.read_text()
    )
    assert runners == ["shared_ir/program.py"]
