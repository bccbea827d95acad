"""Whole-build replay: a build whose every input is a file is keyed by those files' bytes.

A cached rebuild still paid for importing torch and loading the program (about 5 s of a 5.5 s
rebuild of the digits model; every build stage itself was a cache hit), because the stage keys
start from the IR fingerprint, which needs the program loaded. A saved `.pt2` IS the program,
so when MODEL is a `.pt2` and the data options name files (or are absent), the key can be
computed from bytes before anything heavy is imported:

    sha256 of the .pt2, the target, every resolved option, the bytes of the --calibration /
    --eval files (folders: every file, by relative name), tpuedge's source and the tool versions

A hit writes the artifact's files exactly as the cold build wrote them (byte-identical) and
prints that build's report. A `module:function` or `file.py:function` data spec, or a Python
factory MODEL, can read anything when it runs, so those builds are not replayed: they go
through the per-stage cache as before.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["replay_key", "replay", "remember", "cache_folder", "STAGE"]

STAGE = "build"
_DATA_OPTIONS = ("calibration", "eval")


def replay_key(spec: str, target: str, options: dict[str, Any]) -> str | None:
    """The whole-build key, or None when some input is not a file (see the module docstring)."""
    from tpuedge.shared_ir.cache_keys import environment_versions, file_digest

    model = Path(spec)
    if model.suffix != ".pt2" or not model.is_file():
        return None
    data = {}
    for name in _DATA_OPTIONS:
        value = options.get(name)
        if value is None or str(value).lower() == "none":
            continue
        if not Path(str(value)).exists():  # module:function, file.py:function: runs code
            return None
        data[name] = file_digest(Path(str(value)))
    plain = {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(options.items()) if k not in data}
    parts = {"pt2": file_digest(model), "target": target, "options": plain, "data": data, "env": environment_versions()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cache(limit):
    from tpuedge.shared_ir.cache import BuildCache

    return BuildCache.default(limit)


def cache_folder(limit=None) -> Path:
    return _cache(limit).directory


def replay(key: str, out: Path, limit=None) -> str | None:
    """Write the remembered build into `out` (atomically) and return its report, or None."""
    from tpuedge.shared_ir.atomic import atomic_output_dir

    payload = _cache(limit).get(key)
    if payload is None:
        return None
    entry = json.loads(payload)
    with atomic_output_dir(out) as staging:
        for name, encoded in entry["files"].items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(encoded))
    return entry["report"].replace(entry["out"], str(out))


def remember(key: str, out: Path, report: str, limit=None) -> None:
    """Store the folder a build just wrote, with its report, under `key`."""
    files = {
        p.relative_to(out).as_posix(): base64.b64encode(p.read_bytes()).decode()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }
    payload = json.dumps({"files": files, "report": report, "out": str(out)}, sort_keys=True).encode()
    _cache(limit).put(key, payload, stage=STAGE)
