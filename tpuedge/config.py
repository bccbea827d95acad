"""`[tool.tpuedge]` in the user's pyproject.toml: project defaults that flags override.

    [tool.tpuedge]
    model = "examples/digits/model.py:build"
    target = "mcu"
    [tool.tpuedge.android]
    quantize = "int8"
    calibration = "data/calib.npz"

Precedence: command-line flag > [tool.tpuedge.<target>] > [tool.tpuedge] > built-in default.
Paths in the file are relative to the pyproject.toml that holds them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["ProjectConfig", "find_config"]

# Keys whose values are paths (resolved against the config file's folder when they exist there).
_PATH_KEYS = {"model", "calibration", "out", "data"}


@dataclass(frozen=True)
class ProjectConfig:
    path: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)

    def _resolve(self, key: str, value: Any) -> Any:
        if self.path is None or key not in _PATH_KEYS or not isinstance(value, str):
            return value
        head, sep, tail = value.partition(":") if key == "model" and not value.endswith(".pt2") else (value, "", "")
        candidate = self.path.parent / head
        if key == "out" or candidate.exists():
            return str(candidate) + sep + tail
        return value

    def get(self, key: str, target: str | None = None, default: Any = None) -> Any:
        if target and isinstance(self.values.get(target), dict) and key in self.values[target]:
            return self._resolve(key, self.values[target][key])
        if key in self.values and not isinstance(self.values[key], dict):
            return self._resolve(key, self.values[key])
        return default

    def target_options(self, target: str) -> dict[str, Any]:
        table = self.values.get(target, {})
        return {k.replace("-", "_"): self._resolve(k, v) for k, v in table.items()} if isinstance(table, dict) else {}


def find_config(start: Path | None = None) -> ProjectConfig:
    """The nearest pyproject.toml with a [tool.tpuedge] table, from `start` (cwd) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text())
            except tomllib.TOMLDecodeError as exc:
                raise UserError(f"{candidate} is not valid TOML ({exc}); fix it or run from another folder.") from exc
            table = data.get("tool", {}).get("tpuedge")
            if table is not None:
                if not isinstance(table, dict):
                    raise UserError(f"[tool.tpuedge] in {candidate} must be a table.")
                return ProjectConfig(candidate, table)
    return ProjectConfig()
