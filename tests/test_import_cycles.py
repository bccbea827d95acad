"""No import cycles among tpuedge's modules, and backends import `tpuedge.shared_ir...`, never
the top-level `tpuedge` package (which is the front door over them).

A static scan: every `import`/`from` statement in the library's files (inside functions too: a
function-level import only hides a cycle until the function runs), except type-only imports
under `if TYPE_CHECKING:`. Module names follow the installed layout (shared_ir/ is
tpuedge.shared_ir, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "tpuedge": "tpuedge",
    "shared_ir": "tpuedge.shared_ir",
    "cloud": "tpuedge.cloud",
    "edge": "tpuedge.edge",
    "quantize": "tpuedge.quantize",
}
BACKENDS = ("tpuedge.shared_ir", "tpuedge.cloud", "tpuedge.edge", "tpuedge.quantize")
# Cycles wholly inside tpuedge.verify (compare <-> report, the package <-> compare) are being
# untangled by verify's owner; any cycle that reaches outside it fails here.
OPEN_ELSEWHERE = "tpuedge.verify"


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, this: str, is_package: bool) -> list[str]:
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = this.split(".")[: len(this.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            names.extend(f"{base}.{a.name}" for a in node.names)
            names.append(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for imported in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            # `from pkg import sub` names the submodule when there is one, else the package
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                edges.add(imported)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return out


def test_no_import_cycles():
    cycles = [c for c in _cycles(_graph()) if not all(m.startswith(OPEN_ELSEWHERE) for m in c)]
    assert not cycles, cycles


def test_backends_never_import_the_top_level_package():
    graph = _graph()
    offenders = sorted(m for m, edges in graph.items() if m.startswith(BACKENDS) and "tpuedge" in edges)
    assert not offenders, offenders


def test_the_scan_sees_a_cycle_when_there_is_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    from .y import z\n"
    )
    assert _imports(tree, "tpuedge.shared_ir.m", False) == [
        "typing.TYPE_CHECKING",
        "typing",
        "tpuedge.shared_ir.y.z",
        "tpuedge.shared_ir.y",
    ]
