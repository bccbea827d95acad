"""Upstream internals stay in the compatibility modules.

A private name of torch, litert-torch, ai-edge-quantizer or jax (a module or attribute whose
name starts with "_", imported lazily or not), a string naming one (a module path compared
against), or a patch of a library's function (an assignment to, or deletion of, an attribute or
item of an upstream module, a `setattr` on one, a `jax.config.update`) may appear only in the
modules that gate it by version and give it a public fallback. The scan reads every library
module's syntax tree, so a lazy import inside a function counts as much as a top-level one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("tpuedge", "shared_ir", "cloud", "edge", "quantize")
UPSTREAMS = ("torch", "litert_torch", "ai_edge_quantizer", "jax", "jaxlib")

# The compatibility modules: one per upstream, at the lowest layer that uses it.
COMPAT_MODULES = {
    "shared_ir/upstream_gate.py",
    "shared_ir/torch_compat.py",
    "shared_ir/jax_compat.py",
    "edge/litert/litert_torch_compat.py",
    "edge/litert/quantizer_compat.py",
}
# (module, what) outside them, each with why it is no internal.
ALLOWED = {
    # logger names whose chatter the CLI turns down: nothing depends on them
    ("tpuedge/cli.py", "torch.utils._pytree"): "a logger name",
    ("tpuedge/cli.py", "torch._export"): "a logger name",
    # a process start-up setting before jax.distributed.initialize, process-wide by nature
    ("cloud/distributed.py", "jax.config.update"): "jax's documented multi-process set-up",
}

_PRIVATE_PATH = re.compile(r"^(%s)(\.\w+)*\.(_(?!_)\w*)" % "|".join(UPSTREAMS))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _upstream(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in UPSTREAMS


def _chain(node) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"], else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


class _Scan(ast.NodeVisitor):
    """Findings in one module: (line, what)."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        # names bound to upstream modules or their objects -> whether it is an op namespace
        # (`aten = torch.ops.aten`: `aten._softmax` is an ATen op's name, not a private one)
        self.scopes: list[dict[str, bool]] = [{}]

    def _bound(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def _ops(self, chain: list[str]) -> bool:
        return "ops" in chain or any(scope.get(chain[0]) for scope in self.scopes)

    def _function(self, node) -> None:
        self.scopes.append({})
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node) -> None:
        for alias in node.names:
            if _upstream(alias.name):
                if any(_private(part) for part in alias.name.split(".")):
                    self.found.append((node.lineno, f"import {alias.name}"))
                self.scopes[-1][alias.asname or alias.name.split(".")[0]] = False

    def visit_ImportFrom(self, node) -> None:
        if not _upstream(node.module):
            return
        for alias in node.names:
            path = f"{node.module}.{alias.name}"
            if any(_private(part) for part in path.split(".")):
                self.found.append((node.lineno, f"from {node.module} import {alias.name}"))
            self.scopes[-1][alias.asname or alias.name] = False

    def visit_Attribute(self, node) -> None:
        chain = _chain(node)
        if chain is not None and self._bound(chain[0]) and not self._ops(chain) and any(_private(p) for p in chain[1:]):
            self.found.append((node.lineno, ".".join(chain)))
            return
        self.generic_visit(node)

    def visit_Constant(self, node) -> None:
        if isinstance(node.value, str) and _PRIVATE_PATH.match(node.value):
            self.found.append((node.lineno, node.value))

    def visit_Expr(self, node) -> None:  # a docstring or a bare string says, it does nothing
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)

    def _patched(self, target, lineno: int) -> None:
        base = target
        while isinstance(base, ast.Subscript):
            base = base.value
        chain = _chain(base)
        if chain is not None and self._bound(chain[0]) and (len(chain) > 1 or base is not target):
            self.found.append((lineno, f"patches {'.'.join(chain)}"))

    def visit_Assign(self, node) -> None:
        for target in node.targets:
            self._patched(target, node.lineno)
            chain = _chain(node.value)
            if isinstance(target, ast.Name) and chain is not None and self._bound(chain[0]):
                self.scopes[-1][target.id] = self._ops(chain)  # an alias of an upstream object (its registry)
        self.generic_visit(node)

    def visit_AugAssign(self, node) -> None:
        self._patched(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node) -> None:
        for target in node.targets:
            self._patched(target, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node) -> None:
        chain = _chain(node.func)
        if chain in (["setattr"], ["delattr"]) and node.args:
            first = _chain(node.args[0])
            if first is not None and self._bound(first[0]):
                self.found.append((node.lineno, f"{chain[0]} on {'.'.join(first)}"))
        elif chain is not None and self._bound(chain[0]) and len(chain) > 2 and chain[-2:] == ["config", "update"]:
            self.found.append((node.lineno, "jax.config.update"))
        elif (
            chain is not None
            and self._bound(chain[0])
            and len(chain) > 1
            and chain[-1] in ("update", "pop", "setdefault", "clear")
        ):
            self.found.append((node.lineno, f"mutates {'.'.join(chain[:-1])}"))
        self.generic_visit(node)


def internals_outside_compat() -> list[str]:
    found = []
    for folder in LIBRARY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in COMPAT_MODULES:
                continue
            scan = _Scan()
            scan.visit(ast.parse(path.read_text(), filename=name))
            found += [f"{name}:{line}: {what}" for line, what in scan.found if (name, what) not in ALLOWED]
    return found


def test_no_upstream_internals_outside_the_compat_modules():
    found = internals_outside_compat()
    assert not found, "upstream internals outside the compatibility modules:\n" + "\n".join(found)


def test_the_scan_finds_what_it_is_for():
    """The scanner itself: each kind of internal it must catch, caught (lazy imports too)."""
    source = """
import torch
def f(op):
    from torch._export import utils as export_utils
    import litert_torch._convert.core
    from ai_edge_quantizer.algorithms import uniform_quantize_tensor as module
    from litert_torch.backend.lowerings import registry
    import jax
    export_utils.walk = None
    module.uniform_quantize = None
    ops = registry.global_registry.registered_ops
    ops[op] = None
    ops.update({})
    del jax.config.update
    setattr(jax.config, "update", None)
    jax.config.update("jax_enable_x64", True)
    return isinstance(op, torch._ops.OpOverload), "litert_torch._convert.fx_passes."
"""
    scan = _Scan()
    scan.visit(ast.parse(source))
    what = [w for _, w in scan.found]
    assert what == [
        "from torch._export import utils",
        "import litert_torch._convert.core",
        "patches export_utils.walk",
        "patches module.uniform_quantize",
        "patches ops",
        "mutates ops",
        "patches jax.config.update",
        "setattr on jax.config",
        "jax.config.update",
        "torch._ops.OpOverload",
        "litert_torch._convert.fx_passes.",
    ], what


# Private fields read on objects a library hands us (`op._schema`, `module._buffers`), which the
# import scan above cannot see: a field whose name starts with "_" and that tpuedge itself never
# defines must be read in a compatibility module, or be listed here with why it stays.
PRIVATE_FIELDS = {
    "_fields": "a namedtuple's field list: public and documented despite the underscore",
    "_exit": "os._exit: documented; the CLI leaves without a second interpreter teardown",
    "_run_exitfuncs": "CPython's atexit runner, called once before os._exit so exit hooks still run",
    "_register_atexit": "CPython's pre-shutdown hook for thread pools; plain atexit is the fallback",
    "_tab": "flatbuffers' generated classes expose their table so; only the one .tflite reader reads it",
    "_get_full_signature_list": "ai-edge-litert: signature names by tensor index; get_signature_list has no indices",
    "_attn_implementation": "transformers has a setter (set_attn_implementation) and no getter; restored after capture",
}


def _defined_names() -> set[str]:
    """Every name tpuedge binds anywhere: functions, classes, attributes it sets, arguments, imports."""
    names = set()
    for folder in LIBRARY:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
                elif isinstance(node, ast.alias):
                    names.add(node.asname or node.name.split(".")[-1])
                elif isinstance(node, ast.keyword) and node.arg:
                    names.add(node.arg)
    return names


def _private_fields_read(tree, ours: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            chain = _chain(node.value) or []
            if "aten" in chain or "ops" in chain:  # `aten._to_copy`: an ATen op's name, not a field
                continue
        elif (
            isinstance(node, ast.Call)
            and _chain(node.func) in (["getattr"], ["hasattr"])
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
        else:
            continue
        if _private(name) and name not in ours and name not in PRIVATE_FIELDS:
            found.append((node.lineno, name))
    return found


def test_no_private_upstream_fields_read_outside_the_compat_modules():
    ours = _defined_names()
    found = []
    for folder in LIBRARY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name not in COMPAT_MODULES:
                found += [
                    f"{name}:{line}: .{field}"
                    for line, field in _private_fields_read(ast.parse(path.read_text()), ours)
                ]
    assert not found, "private fields of upstream objects read outside the compatibility modules:\n" + "\n".join(found)


def test_the_field_scan_finds_what_it_is_for():
    source = """
def f(op, module, aten):
    a = op._schema.is_mutable
    b = getattr(op, "_overloadname", None)
    c = module._buffers
    d = aten._to_copy.default
    e = module._mine
    module._mine = 1
"""
    tree = ast.parse(source)
    assert sorted(w for _, w in _private_fields_read(tree, {"_mine"})) == ["_buffers", "_overloadname", "_schema"]
