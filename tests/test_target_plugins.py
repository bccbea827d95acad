"""Targets are plugins: the `tpuedge.targets` entry-point group, the built-in three included.

A small third-party package made here (a module plus its `*.dist-info/entry_points.txt`) is put
on the path of a child process; `tpuedge build --help`, `check` and `ops` then list and handle
its target with no edit to tpuedge."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TPUEDGE = str(Path(sys.executable).with_name("tpuedge"))
TOY_MODULE = textwrap.dedent(
    """
    from tpuedge.shared_ir.op_registry import OpRegistry
    from tpuedge.shared_ir.targets import BuildOption, Capability, Target


    class ToyNpuTarget(Target):
        name = "toy-npu"
        summary = "a toy accelerator that multiplies and rectifies"
        runtime = "nothing"
        implemented = True

        def capability(self):
            ops = OpRegistry("toy-npu")
            ops.add("aten.linear.default", "toy matmul unit")
            ops.add("aten.relu", "every relu overload")
            return Capability(target=self.name, ops=ops, notes={"aten.linear.default": "toy matmul unit"})

        def build_options(self):
            return [BuildOption("toy_clock_mhz", "clock of the toy NPU", int, 100)]
    """
)
MODELS = textwrap.dedent(
    """
    import torch

    def linear_relu():
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.zeros(1, 4),)

    def with_sigmoid():
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Sigmoid()), (torch.zeros(1, 4),)
    """
)


@pytest.fixture(scope="module")
def toy_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "toy_npu_target.py").write_text(TOY_MODULE)
    info = site / "toy_npu_target-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-npu-target\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tpuedge.targets]\ntoy-npu = toy_npu_target:ToyNpuTarget\n")
    (site / "toymodels.py").write_text(MODELS)
    paths = [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return site, {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _tpuedge(env, cwd, *args):
    return subprocess.run([TPUEDGE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_build_help_lists_the_plugin_target_and_its_options(toy_env):
    site, env = toy_env
    proc = _tpuedge(env, site, "build", "--help")
    assert proc.returncode == 0, proc.stderr
    choices = re.search(r"--target \[([^\]]+)\]", proc.stdout)[1].split("|")
    assert choices == ["android", "cloud-tpu", "mcu", "toy-npu"]
    assert "--toy-clock-mhz" in proc.stdout and "[toy-npu]" in proc.stdout


def test_check_and_ops_use_the_plugin_targets_registry(toy_env):
    site, env = toy_env
    clean = _tpuedge(env, site, "check", "toymodels.py:linear_relu", "--target", "toy-npu")
    assert clean.returncode == 0, clean.stderr
    assert "no problems for target toy-npu" in clean.stdout
    problem = _tpuedge(env, site, "check", "toymodels.py:with_sigmoid", "--target", "toy-npu")
    assert problem.returncode == 2 and "[op] aten.sigmoid.default" in problem.stderr, problem.stderr
    ops = _tpuedge(env, site, "ops", "--target", "toy-npu")
    assert ops.returncode == 0, ops.stderr
    assert "aten.linear.default" in ops.stdout and "toy matmul unit" in ops.stdout
    assert "toy-npu: 3 ops supported" in ops.stdout  # linear, relu.default (core) and the relu packet


def test_the_built_in_targets_are_entry_points_in_pyproject():
    import tomllib

    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["tpuedge.targets"]
    assert sorted(table) == ["android", "cloud-tpu", "mcu"]
    from tpuedge.shared_ir.targets import all_targets

    assert set(table) <= set(all_targets())


TARGET_NAMES = {"android", "mcu", "cloud-tpu"}


def test_shared_ir_names_no_backend_module_and_no_target():
    """The shared IR knows targets only through the registry: no import of a backend, no target name."""
    offenders = []
    for path in sorted((REPO / "shared_ir").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            module = None
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
            elif isinstance(node, ast.Import):
                module = " ".join(a.name for a in node.names)
            if module and re.search(r"\btpuedge\.(edge|cloud)\b|^(edge|cloud)\b", module):
                offenders.append(f"{path.name}:{node.lineno} imports {module}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in TARGET_NAMES or re.search(r"tpuedge\.(edge|cloud)\.", node.value):
                    offenders.append(f"{path.name}:{node.lineno} names {node.value!r}")
    assert not offenders, offenders


def test_top_level_help_loads_no_target():
    """`tpuedge --help` lists `build` by its one-line help: the registry (and every target module,
    a third party's included) is read only when `build` itself is parsed."""
    code = (
        "import sys, io, contextlib\n"
        "from tpuedge.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
        "assert 'build ' in out.getvalue()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('tpuedge.edge', 'tpuedge.cloud', 'torch', 'jax'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_an_entry_point_that_fails_to_load_leaves_no_partial_registry(monkeypatch):
    from importlib import metadata

    from tpuedge.shared_ir import targets
    from tpuedge.shared_ir.errors import UserError

    good = metadata.EntryPoint(
        "android", "tpuedge.edge.android.android_target:AndroidTarget", targets.ENTRY_POINT_GROUP
    )
    broken = metadata.EntryPoint("zz-broken", "no_such_module_here:Target", targets.ENTRY_POINT_GROUP)
    monkeypatch.setattr(targets, "_REGISTRY", {})
    monkeypatch.setattr(targets, "_loaded", False)
    monkeypatch.setattr(targets, "_entry_points", lambda: [good, broken])
    for _ in range(2):  # the second call fails the same way, not with a registry missing a target
        with pytest.raises(UserError, match="zz-broken.*failed to load"):
            targets.all_targets()
        assert targets._REGISTRY == {}
