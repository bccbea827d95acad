"""How builds use the cache: keys from content, the stages a build hit, and `--no-cache`.

    payload = cached_stage("float_tflite", {"ir": program.fingerprint, ...}, build_bytes)

A key is sha256 over the stage name, the stage's own parts (IR fingerprint, target, resolved
options, digests of calibration/eval arrays: their dtypes, shapes and bytes, never file
paths) and the versions of tpuedge and every tool a build runs. tpuedge's version string does
not change while its code does (an editable install, a checkout), so the digest of its own
source files goes into every key as well: editing a lowering invalidates what it produced.

`build_session(enabled)` scopes one build: it records each stage's hit or miss for the
report and turns the cache off for `--no-cache`. Outside a session the cache is on unless
$TPUEDGE_NO_CACHE is set. What a build records never enters its artifacts: a hit gives the
same bytes as a cold build, so the manifest cannot say which one it was.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.cache import BuildCache

__all__ = [
    "build_session",
    "BuildSession",
    "StageRecord",
    "read_cache_line",
    "active_cache",
    "cache_key",
    "cached_stage",
    "cached_clean_check",
    "data_digest",
    "environment_versions",
    "encode_json",
    "decode_json",
    "encode_blob_and_json",
    "decode_blob_and_json",
    "encode_array_tree",
    "decode_array_tree",
]

# Every tool whose output a cached stage holds (one list: a stage's key never depends on which
# target happened to import what).
CACHE_TOOLS = (
    "litert-torch",
    "litert-converter",
    "ai-edge-litert",
    "ai-edge-quantizer",
    "tflite-micro",
    "jax",
    "jaxlib",
    "libtpu",
    "numpy",
)
_PACKAGES = ("tpuedge", "shared_ir", "cloud", "edge", "quantize")


@dataclass(frozen=True)
class StageRecord:
    stage: str
    outcome: str  # "hit", "miss", "rebuilt" (a damaged entry was dropped and built again)


@dataclass
class BuildSession:
    cache: BuildCache | None
    stages: list[StageRecord] = field(default_factory=list)

    def describe(self) -> str:
        if self.cache is None:
            return "cache: off (--no-cache or TPUEDGE_NO_CACHE)"
        if not self.stages:
            return f"cache: no cached stage ran ({self.cache.directory})"
        counts: dict[str, dict[str, int]] = {}  # outcome -> stage -> how many times (in build order)
        for record in self.stages:
            stages = counts.setdefault(record.outcome, {})
            stages[record.stage] = stages.get(record.stage, 0) + 1
        parts = [
            f"{outcome} " + ", ".join(stage if n == 1 else f"{stage} x{n}" for stage, n in stages.items())
            for outcome, stages in counts.items()
        ]
        return f"cache: {'; '.join(parts)} ({self.cache.directory})"


def read_cache_line(line: str) -> dict[str, list[str]]:
    """The stages per outcome that a build's `cache:` line (`BuildSession.describe`, or a replayed
    build's `cache: hit build (...)`) names, in its order: 'cache: miss a, b x3; hit c (folder)' ->
    {"miss": ["a", "b x3"], "hit": ["c"]}; {} for a build that ran no cached stage or no cache.
    The one reader of that line, for tests and benchmarks."""
    body = line.strip().removeprefix("cache: ").rsplit(" (", 1)[0]
    outcomes: dict[str, list[str]] = {}
    for part in body.split("; "):
        outcome, _, stages = part.partition(" ")
        if outcome in ("hit", "miss", "rebuilt") and stages:
            outcomes[outcome] = stages.split(", ")
    return outcomes


_SESSION: contextvars.ContextVar[BuildSession | None] = contextvars.ContextVar("tpuedge_build_session", default=None)


@contextlib.contextmanager
def build_session(enabled: bool = True, *, limit: str | int | None = None) -> Iterator[BuildSession]:
    """One build's use of the cache (None inside when disabled); records every stage's outcome."""
    enabled = enabled and not os.environ.get("TPUEDGE_NO_CACHE")  # the variable turns it off everywhere
    session = BuildSession(BuildCache.default(limit) if enabled else None)
    token = _SESSION.set(session)
    try:
        yield session
    finally:
        _SESSION.reset(token)


def active_cache() -> BuildCache | None:
    session = _SESSION.get()
    if session is not None:
        return session.cache
    if os.environ.get("TPUEDGE_NO_CACHE"):
        return None
    return BuildCache.default()


def _record(stage: str, outcome: str) -> None:
    session = _SESSION.get()
    if session is not None:
        session.stages.append(StageRecord(stage, outcome))


# ---- keys -------------------------------------------------------------------------------
def _source_files() -> dict[str, Path]:
    """tpuedge's own source files by import path ("tpuedge/shared_ir/cache_keys.py"): the same
    names in a checkout (package-dir maps its folders) and in a non-editable install, so a
    checkout and its installed copy share cache entries."""
    root = Path(__file__).resolve().parent.parent
    if root.name == "tpuedge" and not (root / "tpuedge").is_dir():  # installed: all of it under one folder
        folders = {"tpuedge": root}
    else:
        folders = {"tpuedge": root / "tpuedge", **{f"tpuedge/{p}": root / p for p in _PACKAGES if p != "tpuedge"}}
    files: dict[str, Path] = {}
    for name, folder in folders.items():
        for path in folder.rglob("*") if folder.is_dir() else ():
            if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
                files[f"{name}/{path.relative_to(folder).as_posix()}"] = path
    return files


@functools.cache
def _source_digest() -> str:
    """sha256 over tpuedge's own source files (import paths and contents), in a checkout or installed."""
    digest = hashlib.sha256()
    for name, path in sorted(_source_files().items()):
        digest.update(f"{name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def environment_versions() -> dict[str, str]:
    from tpuedge.shared_ir.tool_versions import tool_versions

    return {**tool_versions(*CACHE_TOOLS), "tpuedge-source": _source_digest()}


def _update_with_array(digest, array) -> None:
    import numpy as np

    array = np.ascontiguousarray(np.asarray(array))
    digest.update(f"{array.dtype.str}{list(array.shape)}:".encode())
    digest.update(array.tobytes())


def data_digest(data: Any) -> str | None:
    """sha256 over arrays (dtype, shape, bytes), nested in lists/tuples/dicts; None for None."""
    if data is None:
        return None
    digest = hashlib.sha256()

    def walk(value: Any) -> None:
        if value is None:
            digest.update(b"N;")
        elif isinstance(value, dict):
            digest.update(f"D{len(value)};".encode())
            for k in sorted(value, key=str):
                digest.update(f"{k!s};".encode())
                walk(value[k])
        elif isinstance(value, (list, tuple)):
            digest.update(f"L{len(value)};".encode())
            for item in value:
                walk(item)
        elif isinstance(value, (str, int, float, bool)):
            digest.update(f"S{value!r};".encode())
        else:
            if hasattr(value, "detach"):  # a torch tensor
                value = value.detach().cpu().numpy()
            _update_with_array(digest, value)

    walk(data)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 over a file's bytes, or a folder's files (relative names and bytes, in name order)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(f"{file.relative_to(path).as_posix() if path.is_dir() else ''}\n".encode())
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def cache_key(stage: str, parts: dict[str, Any]) -> str:
    """sha256 over the stage, its parts (JSON-able) and the versions of tpuedge and its tools."""
    text = json.dumps({"stage": stage, "parts": parts, "versions": environment_versions()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def cached_stage(
    stage: str,
    parts: dict[str, Any],
    build: Callable[[], Any],
    *,
    encode: Callable[[Any], bytes] = bytes,
    decode: Callable[[bytes], Any] = bytes,
) -> Any:
    """`build()`'s result for these parts: from the cache when an intact entry holds it. An
    `encode` that gives None for a value stores nothing (a value this stage's format can't hold)."""
    store = active_cache()
    if store is None:
        return build()
    key = cache_key(stage, parts)
    try:
        payload, state = store.lookup(key)
    except OSError as exc:  # an unreadable cache folder costs a rebuild, never the build
        payload, state = None, "absent"
        _warn(f"could not read the build cache ({exc}); building {stage} without it")
    if payload is not None:
        try:
            value = decode(payload)
        except Exception:  # intact bytes this code can't read back: drop them and rebuild
            store.discard(key)
            state = "damaged"
        else:
            _record(stage, "hit")
            return value
    value = build()
    try:
        payload = encode(value)
        if payload is not None:
            store.put(key, payload, stage=stage)
    except OSError as exc:
        _warn(f"could not write {stage} to the build cache ({exc}); the build itself is unaffected")
    _record(stage, "rebuilt" if state == "damaged" else "miss")
    return value


def cached_clean_check(program, target: str, check: Callable[[], list]) -> list:
    """`check()` (a program's problems for a built-in target), remembered when it found none.

    A clean check of the same IR by the same code and tools stays clean; remembering it spares a
    rebuild the backend's import and decomposition (seconds for litert-torch). Problems are never
    cached: they are reported from a fresh check each time.
    """
    from tpuedge.shared_ir.targets import get_target

    store = active_cache()
    if store is None or not type(get_target(target)).__module__.startswith("tpuedge."):
        return check()  # a third-party target's code is not in the key
    key = cache_key("check", {"ir": program.fingerprint, "target": target})
    try:
        if store.get(key) == b"clean":
            _record("check", "hit")
            return []
    except OSError:
        pass
    problems = check()
    if not problems:
        try:
            store.put(key, b"clean", stage="check")
        except OSError:
            pass
        _record("check", "miss")
    return problems


def _warn(message: str) -> None:
    import sys

    print(f"tpuedge: {message}", file=sys.stderr)


# ---- payload codecs -------------------------------------------------------------------------
def encode_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def decode_json(payload: bytes) -> Any:
    return json.loads(payload)


def encode_blob_and_json(value: tuple[bytes, Any]) -> bytes:
    """(bytes, JSON-able) -> one payload: 8-byte length of the JSON, the JSON, the bytes."""
    blob, meta = value
    text = encode_json(meta)
    return len(text).to_bytes(8, "little") + text + bytes(blob)


def decode_blob_and_json(payload: bytes) -> tuple[bytes, Any]:
    size = int.from_bytes(payload[:8], "little")
    if size > len(payload) - 8:
        raise ValueError("blob-and-json payload shorter than its JSON")
    return payload[8 + size :], decode_json(payload[8 : 8 + size])


def encode_array_tree(tree: Any) -> bytes:
    """Nested dicts/lists of numpy arrays and JSON scalars -> bytes (arrays kept exact, no pickle)."""
    import io

    import numpy as np

    arrays: list = []

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {"d": [[str(k), strip(v)] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return {"l": [strip(v) for v in value], "tuple": isinstance(value, tuple)}
        if isinstance(value, np.ndarray) or isinstance(value, np.generic):
            arrays.append(np.asarray(value))
            return {"a": len(arrays) - 1, "scalar": isinstance(value, np.generic)}
        if value is None or isinstance(value, (str, bool, int, float)):
            return {"v": value}
        raise TypeError(f"can't cache a {type(value).__name__}")

    skeleton = strip(tree)
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    return encode_blob_and_json((buffer.getvalue(), skeleton))


def decode_array_tree(payload: bytes) -> Any:
    import io

    import numpy as np

    blob, skeleton = decode_blob_and_json(payload)
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        arrays = [data[f"arr_{i}"] for i in range(len(data.files))]

    def build(node: dict) -> Any:
        if "d" in node:
            return {k: build(v) for k, v in node["d"]}
        if "l" in node:
            items = [build(v) for v in node["l"]]
            return tuple(items) if node["tuple"] else items
        if "a" in node:
            array = arrays[node["a"]]
            return array[()] if node["scalar"] else array
        return node["v"]

    return build(skeleton)
