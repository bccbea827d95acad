"""What the CLI does to the process it runs in: warnings, logging, environment variables.

Run as child processes, as a user's shell runs `tpuedge` (warning filters and environment
variables are process-wide, so an in-process run would not show the real behaviour)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TPUEDGE = str(Path(sys.executable).with_name("tpuedge"))


def _run(args, cwd, env_extra=None, drop=()):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra or {})
    return subprocess.run([TPUEDGE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


USER_MODEL = textwrap.dedent(
    """
    import warnings
    import torch

    def old_helper():
        warnings.warn("old_helper is deprecated, use new_helper", DeprecationWarning)
        warnings.warn("argument order changes in v2", FutureWarning)

    def build():
        old_helper()
        return torch.nn.Linear(3, 2), (torch.zeros(1, 3),)
    """
)


def test_the_users_own_warnings_still_show(tmp_path):
    (tmp_path / "usermodel.py").write_text(USER_MODEL)
    proc = _run(["export", "usermodel.py:build", "-o", "m.pt2"], tmp_path, drop=("TPUEDGE_VERBOSE", "PYTHONWARNINGS"))
    assert proc.returncode == 0, proc.stderr
    assert "DeprecationWarning: old_helper is deprecated" in proc.stderr
    assert "FutureWarning: argument order changes in v2" in proc.stderr


def test_third_party_warnings_are_held_by_module_and_shown_when_verbose():
    code = textwrap.dedent(
        """
        import warnings
        from tpuedge.cli import _quiet_third_party
        from tpuedge.shared_ir.held_logs import held_third_party_output
        _quiet_third_party()
        with held_third_party_output() as held:
            warnings.warn_explicit("torch internal notice", FutureWarning, "torch/x.py", 1, module="torch._export.x")
            warnings.warn_explicit("jax internal notice", DeprecationWarning, "jax/y.py", 1, module="jax.y")
            warnings.warn_explicit("user notice", DeprecationWarning, "torch_model.py", 1, module="torch_model")
        print(held.text)
        """
    )
    quiet = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "TPUEDGE_VERBOSE": ""}
    )
    assert "user notice" in quiet.stderr
    assert "internal notice" not in quiet.stderr
    assert "torch internal notice" in quiet.stdout and "jax internal notice" in quiet.stdout  # held, not dropped
    verbose = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "TPUEDGE_VERBOSE": "1"}
    )
    assert "torch internal notice" in verbose.stderr


INSPECT_EACH = textwrap.dedent(
    """
    import sys
    from tpuedge.cli import main
    for path in sys.argv[1:]:
        print(f"=== {path}", file=sys.stderr, flush=True)
        try:
            main(["inspect", path])
        except SystemExit as exc:
            print(f"=== exit {exc.code}", file=sys.stderr, flush=True)
    """
)


@pytest.fixture(scope="module")
def bad_pt2_files(tmp_path_factory):
    import zipfile

    from cli_runner import run_cli

    work = tmp_path_factory.mktemp("pt2")
    good = work / "good.pt2"
    code, _, err = run_cli(
        "export", f"{Path(__file__).resolve().parents[1] / 'examples' / 'models.py'}:build_mlp", "-o", str(good)
    )
    assert code == 0, err
    data = good.read_bytes()
    (work / "truncated.pt2").write_bytes(data[: len(data) // 2])
    (work / "random.pt2").write_bytes(os.urandom(4096))
    (work / "text.pt2").write_text("not a model\n")
    with zipfile.ZipFile(work / "junkzip.pt2", "w") as z:
        z.writestr("junk/data.bin", os.urandom(256))
    return work


def _sections(stderr: str) -> dict[str, tuple[str, str]]:
    """{file name: (what was printed for it, exit code)} from INSPECT_EACH's output."""
    out, name, lines = {}, None, []
    for line in stderr.splitlines():
        if line.startswith("=== exit "):
            out[Path(name).name] = ("\n".join(lines), line.removeprefix("=== exit "))
        elif line.startswith("=== "):
            name, lines = line[4:], []
        else:
            lines.append(line)
    return out


BAD_PT2 = ("truncated.pt2", "random.pt2", "text.pt2", "junkzip.pt2")


def test_a_bad_pt2_prints_one_paragraph_and_exits_2(bad_pt2_files):
    files = [str(bad_pt2_files / n) for n in BAD_PT2]
    env = {k: v for k, v in os.environ.items() if k != "TPUEDGE_VERBOSE"}
    proc = subprocess.run(
        [sys.executable, "-c", INSPECT_EACH, *files], capture_output=True, text=True, env=env, timeout=300
    )
    sections = _sections(proc.stderr)
    assert sorted(sections) == sorted(BAD_PT2), proc.stderr[-3000:]
    for name, (printed, code) in sections.items():
        assert code == "2", (name, printed)
        assert printed.startswith(f"error: {bad_pt2_files / name} is not a readable torch.export .pt2 file"), printed
        assert printed.count("\n") == 0 and "Traceback" not in printed, printed


def test_torchs_own_log_shows_with_tpuedge_verbose(bad_pt2_files):
    proc = subprocess.run(
        [sys.executable, "-c", INSPECT_EACH, str(bad_pt2_files / "truncated.pt2")],
        capture_output=True,
        text=True,
        env={**os.environ, "TPUEDGE_VERBOSE": "1"},
        timeout=300,
    )
    printed, code = _sections(proc.stderr)["truncated.pt2"]
    assert code == "2"
    assert "Ran into the following error when deserializing" in printed
    assert printed.splitlines()[-1].startswith("error: ")


ENV_MODEL = textwrap.dedent(
    """
    import os
    import torch

    def build():
        print("JAX_PLATFORMS seen by the model:", repr(os.environ.get("JAX_PLATFORMS")))
        return torch.nn.Linear(3, 2), (torch.zeros(1, 3),)
    """
)


@pytest.mark.parametrize(
    "command, user_value, seen",
    [
        ("export", None, "'cpu'"),  # host-only command: CPU unless the user says otherwise
        ("export", "", "''"),  # an explicit value, even empty (jax picks), is the user's
        ("verify", None, "None"),  # runs artifacts: the user's environment decides the device
    ],
)
def test_jax_platforms_is_the_users_except_cpu_for_host_only_commands(tmp_path, command, user_value, seen):
    (tmp_path / "envmodel.py").write_text(ENV_MODEL)
    args = {
        "export": ["export", "envmodel.py:build", "-o", "m.pt2"],
        # the model is loaded first; the missing folder then fails (exit 2): only the environment matters here
        "verify": ["verify", "no-such-build", "--model", "envmodel.py:build", "--data", "none.npz"],
    }[command]
    extra = {} if user_value is None else {"JAX_PLATFORMS": user_value}
    proc = _run(args, tmp_path, extra, drop=("JAX_PLATFORMS",))
    assert f"JAX_PLATFORMS seen by the model: {seen}" in proc.stdout, proc.stdout + proc.stderr
