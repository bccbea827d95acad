"""The checkout runs without an install: scripts, notebooks and `python bench/...` at the repo root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_import_from_repo_root_uses_the_checkout():
    # `python -c` puts the cwd first on sys.path, so the repo's tpuedge/ shadows any install:
    # its subpackages must resolve to the repo's top-level folders. -S leaves site-packages (and
    # an editable install's import hook) out, so only the checkout itself can answer; these
    # packages import nothing third-party at module level.
    code = (
        "import tpuedge, tpuedge.edge, tpuedge.cloud, tpuedge.quantize, tpuedge.shared_ir;"
        "print(tpuedge.edge.__file__); print(tpuedge.cloud.__file__)"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, env=_clean_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    edge_file, cloud_file = out.stdout.split()
    assert Path(edge_file) == REPO / "edge" / "__init__.py"
    assert Path(cloud_file) == REPO / "cloud" / "__init__.py"


def test_bench_script_runs_from_repo_root(tmp_path):
    out = subprocess.run(
        [sys.executable, "bench/cli_startup.py", "--runs", "1", "--json", str(tmp_path / "s.json")],
        cwd=REPO,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "s.json").is_file()
