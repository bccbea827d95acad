"""Library modules stay small and say what they export: every module of shared_ir, quantize,
edge, cloud and tpuedge (subfolders included) is at most 400 lines with a module-level
`__all__`; and no import cycle inside tpuedge/verify (function-level and type-only imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("shared_ir", "quantize", "edge", "cloud", "tpuedge")
MAX_LINES = 400


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.py"))


def _declares_all(tree: ast.Module) -> bool:
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_every_library_module_is_small_and_declares_its_api():
    problems = {}
    for folder in LIBRARY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            lines = len(text.splitlines())
            found = ([f"{lines} lines"] if lines > MAX_LINES else []) + (
                [] if _declares_all(ast.parse(text)) else ["no __all__"]
            )
            if found:
                problems[str(path.relative_to(ROOT))] = ", ".join(found)
    assert problems == {}, f"over {MAX_LINES} lines or without __all__: {problems}"


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
