"""The `tpuedge` front door: model specs, config defaults, export/check/ops/inspect, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_runner import run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MLP = f"{EXAMPLES / 'models.py'}:build_mlp"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nowhere/missing.py:build", "Model file nowhere/missing.py does not exist"),
        (f"{FIXTURES / 'bad_models.py'}:nope", "has no attribute 'nope'"),
        (f"{FIXTURES / 'bad_models.py'}:raises", "raised ValueError: weights file weights.bin not found at"),
        (
            f"{FIXTURES / 'bad_models.py'}:wrong_type",
            "returned Linear; it must return (torch.nn.Module, example_inputs)",
        ),
        (f"{FIXTURES / 'bad_models.py'}:not_tensors", "returned (Linear, tuple)"),
        (f"{FIXTURES / 'bad_models.py'}:NOT_CALLABLE", "is a int, not a function"),
        ("examples/models.py", "names no factory function"),
        ("no_such_package_xyz:build", "No module 'no_such_package_xyz'"),
    ],
)
def test_model_spec_errors_are_one_paragraph_exit_2(spec, message):
    code, out, err = run_cli("export", spec, "-o", "/tmp/never-written.pt2")
    assert code == 2
    assert message in err, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not Path("/tmp/never-written.pt2").exists()


def test_factory_error_points_at_the_users_line():
    code, _, err = run_cli("export", f"{FIXTURES / 'bad_models.py'}:raises")
    assert code == 2 and "bad_models.py:7 in raises" in err


def test_export_then_inspect_a_pt2(tmp_path):
    target = tmp_path / "mlp.pt2"
    code, out, _ = run_cli("export", MLP, "-o", str(target))
    assert code == 0 and target.is_file()
    code, out, _ = run_cli("inspect", str(target))
    assert code == 0
    assert "aten.linear.default" in out and "float32" in out and "[4, 32]" in out
    import tpuedge

    assert tpuedge.Program.load(target).fingerprint in out
    assert "parameters: 6,922" in out and out.startswith("mlp")


def test_spec_names():
    from tpuedge.shared_ir.model_spec import spec_name

    assert spec_name("examples/digits/model.py:build") == "digits"
    assert spec_name("examples/models.py:build_mlp") == "mlp"
    assert spec_name("nets/resnet.py:build") == "resnet"
    assert spec_name("pkg.vision.model:build") == "vision"
    assert spec_name("saved/encoder.pt2") == "encoder"


def test_package_module_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    code, out, _ = run_cli("export", "models:build_mlp", "-o", str(tmp_path / "m.pt2"))
    assert code == 0 and (tmp_path / "m.pt2").is_file()


def test_check_exit_codes_and_all_problems_at_once():
    code, _, err = run_cli("check", f"{FIXTURES / 'bad_models.py'}:custom_op", "--target", "cloud-tpu")
    assert code == 2
    assert "tpuedge_test.mystery.default" in err and "bad_models.py:" in err


def test_unknown_target_is_a_user_error():
    code, _, err = run_cli("check", MLP, "--target", "ps5")
    assert code == 2 and "Target 'ps5' is not available" in err and "android" in err


def test_ops_table_comes_from_the_registry():
    from tpuedge.shared_ir.coverage import coverage

    code, out, _ = run_cli("ops", "--target", "cloud-tpu")
    assert code == 0
    rows = coverage("cloud-tpu")
    supported = sum(r.supported for r in rows)
    assert f"cloud-tpu: {supported} ops supported" in out


def test_ops_table_shows_what_the_targets_passes_rewrite():
    """Old code: `tpuedge ops --target mcu` listed LeakyReLU (which mcu's passes write as
    max(x, a*x)) as unsupported without a note, and a form the pass leaves got the lowering's
    complaint only."""
    import torch

    import tpuedge
    from tpuedge.shared_ir.coverage import coverage

    rows = {r.op: r for r in coverage("mcu")}
    leaky = rows["aten.leaky_relu.default"]
    assert leaky.rewritten and not leaky.supported and "max(x, a*x)" in leaky.note
    assert rows["aten.lstm"].rewritten and "unrolled" in rows["aten.lstm"].note  # not core ATen: its own row
    code, out, _ = run_cli("ops", "--target", "mcu")
    assert code == 0 and "rewritten on the IR into supported ones" in out
    assert {r.op: r for r in coverage("android")}["aten.adaptive_max_pool2d"].rewritten  # android's own passes
    negative = tpuedge.export(torch.nn.LeakyReLU(-0.2).eval(), (torch.zeros(1, 4),), name="negative")
    (problem,) = negative.check("mcu")
    assert "take only some forms of it" in problem.suggestion and "slope in [0, 1]" in problem.suggestion


def test_config_defaults_and_flag_override(tmp_path, monkeypatch):
    (tmp_path / "net.py").write_text(
        textwrap.dedent(
            """
            import torch
            def build():
                return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.GELU()), (torch.randn(1, 3),)
            """
        )
    )
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tpuedge]\nmodel = "net.py:build"\ntarget = "nowhere-chip"\n[tool.tpuedge.android]\nquantize = "int8"\n'
    )
    sub = tmp_path / "src"
    sub.mkdir()
    monkeypatch.chdir(sub)  # config is found from a sub-folder; paths resolve against its file
    code, _, err = run_cli("check")
    assert code == 2 and "Target 'nowhere-chip' is not available" in err  # target came from the config
    code, out, err = run_cli("export", "-o", str(tmp_path / "net.pt2"))
    assert code == 0 and (tmp_path / "net.pt2").is_file()  # model came from the config

    from tpuedge.config import find_config

    config = find_config()
    assert config.path == tmp_path / "pyproject.toml"
    assert config.get("quantize", "android") == "int8"
    assert config.get("quantize", "mcu") is None
    assert config.get("model") == f"{tmp_path / 'net.py'}:build"


def test_missing_model_and_target_say_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("check", "--target", "mcu")
    assert code == 2 and "No MODEL given" in err


def test_help_imports_no_heavy_library(tmp_path):
    script = (
        "import sys\nfrom tpuedge.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'jax', 'litert_torch', 'ai_edge_litert', 'tflite_micro') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    # cwd outside the repo: `python -c` puts cwd first on sys.path, and the repo's tpuedge/ folder
    # alone is not the installed package
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout
    assert "HEAVY []" in out
    assert "build" in out and "check" in out


def test_packages_install_under_the_tpuedge_namespace(tmp_path):
    script = (
        "import importlib.util, tpuedge.shared_ir, tpuedge.cloud, tpuedge.edge, tpuedge.quantize\n"
        "print([importlib.util.find_spec(n) is None for n in ('edge', 'cloud', 'shared_ir', 'quantize')])\n"
    )
    # The installed layout, not a checkout someone put on PYTHONPATH (where the folders are top-level).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path, env=env
    )
    assert out.stdout.strip() == "[True, True, True, True]"


def test_check_announces_the_targets_rewrites():
    code, out, _ = run_cli("check", f"{EXAMPLES / 'models.py'}:build_transformer", "--target", "mcu")
    assert code == 0 and "no problems for target mcu" in out
    assert "rewrote 1 GELU op(s) as x*sigmoid(1.702*x)" in " ".join(out.split())
    code, out, _ = run_cli("check", MLP, "--target", "mcu")
    assert code == 0 and "rewrite" not in out


def test_file_specs_load_under_their_stem_so_artifacts_do_not_depend_on_the_process(tmp_path):
    """Class paths reach artifact tensor names: a per-process module name broke byte-identity."""
    from tpuedge.shared_ir.model_spec import load_module_and_inputs

    module, _ = load_module_and_inputs(f"{EXAMPLES / 'models.py'}:build_mlp")
    assert type(module).__module__ == "models"
    tpuedge_exe = Path(sys.executable).with_name("tpuedge")
    outputs = []
    for run in ("first", "second"):
        out = tmp_path / run
        subprocess.run(
            [
                str(tpuedge_exe),
                "build",
                f"{EXAMPLES / 'models.py'}:build_mlp",
                "--target",
                "android",
                "--quantize",
                "none",
                "--out",
                str(out),
            ],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )
        outputs.append((out / "model.tflite").read_bytes())
    assert outputs[0] == outputs[1]
