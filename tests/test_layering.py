"""Layers point one way (ARCHITECTURE point 14): `tpuedge` (CLI, verify, serve, testing) ->
backends (`edge`, `cloud`) -> `quantize` -> `shared_ir`. A module imports only from its own layer
or lower ones, and edge and cloud do not import each other.

Every import counts wherever it is written: at module level, inside a function (a lazy import),
under `if TYPE_CHECKING:`; so does a module named in a string constant (importlib, a child
process's entry point), when that string names a module of this repo.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder -> its package in the installed namespace (pyproject's package-dir)
PACKAGES = {
    "shared_ir": "tpuedge.shared_ir",
    "quantize": "tpuedge.quantize",
    "edge": "tpuedge.edge",
    "cloud": "tpuedge.cloud",
    "tpuedge": "tpuedge",
}
RANK = {"shared_ir": 0, "quantize": 1, "edge": 2, "cloud": 2, "tpuedge": 3}
_MODULE_STRING = re.compile(r"tpuedge(\.\w+)+(:\w+)?")


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None outside tpuedge."""
    parts = module.split(".")
    if parts[0] != "tpuedge":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK and parts[1] != "tpuedge" else "tpuedge"


def _module_file(module: str) -> Path | None:
    parts = module.split(".")
    for folder, package in PACKAGES.items():
        if module == package or module.startswith(package + "."):
            rest = parts[len(package.split(".")) :]
            base = ROOT / folder / Path(*rest) if rest else ROOT / folder
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    return path
            return None
    return None


def _named_module(text: str) -> str | None:
    """The repo module a string such as "tpuedge.edge.mcu.tflm_worker.serve" names, if any."""
    if not _MODULE_STRING.fullmatch(text):
        return None
    parts = text.split(":")[0].split(".")
    for end in range(len(parts), 1, -1):
        if _module_file(".".join(parts[:end])) is not None:
            return ".".join(parts[:end])
    return None


def _package_of(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    return ".".join([PACKAGES[folder], *rest][:-1])  # a module's package; __init__.py's own


def imported_modules(source: str, package: str = "tpuedge") -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, at any depth; `package` resolves relative ones."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base == "tpuedge":  # `from tpuedge import cloud` imports the subpackage
                found += [(node.lineno, f"tpuedge.{a.name}" if a.name in RANK else "tpuedge") for a in node.names]
            else:
                found.append((node.lineno, base))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = _named_module(node.value)
            if named is not None:
                found.append((node.lineno, named))
    return sorted(found, key=lambda f: f[0])


def _allowed(own: str, target: str) -> bool:
    return target == own or RANK[target] < RANK[own]


def violations() -> list[str]:
    out = []
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            package = _package_of(path)
            for line, module in imported_modules(path.read_text(), package):
                target = layer_of(module)
                if target is not None and not _allowed(folder, target):
                    out.append(f"{path.relative_to(ROOT)}:{line} -> {module}")
    return out


def test_layers_point_one_way():
    found = violations()
    assert found == [], "imports against the layers (tpuedge -> edge, cloud -> quantize -> shared_ir):\n" + "\n".join(
        found
    )


def test_every_kind_of_import_is_seen():
    source = """
from typing import TYPE_CHECKING
import tpuedge.cloud.mesh
from tpuedge import UserError, edge
if TYPE_CHECKING:
    from tpuedge.verify.result import VerifyResult
def lazy():
    from tpuedge.quantize.metrics import cosine
    return "tpuedge.edge.mcu.tflm_worker.serve", "tpuedge.targets", "tpuedge.cloud maps SGD"
"""
    assert imported_modules(source) == [
        (2, "typing"),
        (3, "tpuedge.cloud.mesh"),
        (4, "tpuedge"),
        (4, "tpuedge.edge"),
        (6, "tpuedge.verify.result"),
        (8, "tpuedge.quantize.metrics"),
        (9, "tpuedge.edge.mcu.tflm_worker"),
    ]
    assert [layer_of(m) for _, m in imported_modules(source)] == [
        None,
        "cloud",
        "tpuedge",
        "edge",
        "tpuedge",
        "quantize",
        "edge",
    ]
    assert not _allowed("cloud", "edge") and not _allowed("quantize", "cloud") and _allowed("edge", "quantize")


def test_relative_imports_resolve_to_their_package():
    assert imported_modules("from . import x\nfrom ..quantize import y\n", "tpuedge.cloud") == [
        (1, "tpuedge.cloud"),
        (2, "tpuedge.quantize"),
    ]
