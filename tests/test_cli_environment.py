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


def test_third_party_warnings_are_filtered_by_module_and_shown_when_verbose():
    code = textwrap.dedent(
        """
        import warnings
        from tpuedge.cli import _quiet_third_party
        _quiet_third_party()
        warnings.warn_explicit("torch internal notice", FutureWarning, "torch/x.py", 1, module="torch._export.x")
        warnings.warn_explicit("jax internal notice", DeprecationWarning, "jax/y.py", 1, module="jax.y")
        warnings.warn_explicit("user notice", DeprecationWarning, "torch_model.py", 1, module="torch_model")
        """
    )
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "TPUEDGE_VERBOSE": ""})
    assert "user notice" in quiet.stderr
    assert "internal notice" not in quiet.stderr
    verbose = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "TPUEDGE_VERBOSE": "1"})
    assert "torch internal notice" in verbose.stderr
