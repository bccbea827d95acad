"""The content-addressed build cache on disk: one file per entry, checked by its sha256 on every read.

    store = BuildCache.default()              # $TPUEDGE_CACHE_DIR, else ~/.cache/tpuedge
    data = store.get(key)                      # bytes, or None (absent, or damaged: then deleted)
    store.put(key, data, stage="float_tflite")

An entry is one file `v1/<key[:2]>/<key>.entry`: a JSON header line (stage, payload size and
sha256) and the payload. It is written to a temp file beside it and renamed into place
(`os.replace`), so readers see the old entry, the new one or none, never half of one; two
processes writing the same key write the same bytes and the last rename wins. A payload whose
size or sha256 does not match its header (a truncated write, a flipped bit, an edited file) is
never served: `get` deletes it and reports a miss, and the caller rebuilds it.

Size: `$TPUEDGE_CACHE_SIZE` (bytes, or with a K/M/G suffix; default 2G). After each write the
least recently used entries (a hit touches its file's mtime) are deleted until the total fits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tpuedge.shared_ir.atomic import write_bytes_atomic
from tpuedge.shared_ir.errors import UserError

__all__ = ["BuildCache", "CacheInfo", "default_cache_dir", "parse_size", "DEFAULT_SIZE_LIMIT"]

DEFAULT_SIZE_LIMIT = 2 * 1024**3
_LAYOUT = "v1"  # bump when the entry format changes: old entries are then simply never found
_SUFFIX = ".entry"
_MAGIC = "tpuedge-cache-entry"
# A temp file older than this was left by a process that died mid-write; eviction removes it.
_STALE_TEMP_SECONDS = 3600
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def default_cache_dir() -> Path:
    """$TPUEDGE_CACHE_DIR, else $XDG_CACHE_HOME/tpuedge, else ~/.cache/tpuedge."""
    explicit = os.environ.get("TPUEDGE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "tpuedge"


def parse_size(text: str | int, where: str = "TPUEDGE_CACHE_SIZE") -> int:
    """'2G', '500M', '1048576' -> bytes (binary units)."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    raw = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = raw, ""
    if raw and raw[-1] in _UNITS:
        number, unit = raw[:-1], raw[-1]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not number or value < 0:
        raise UserError(f"{where}={text!r} is not a size; give bytes or a number with K, M or G (e.g. 2G, 500M).")
    return int(value * _UNITS[unit])


@dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    total_bytes: int
    limit_bytes: int
    by_stage: dict[str, tuple[int, int]]  # stage -> (entries, bytes)

    def describe(self) -> str:
        lines = [
            f"cache folder: {self.directory}",
            f"entries: {self.entries}, {self.total_bytes:,} bytes of {self.limit_bytes:,} allowed "
            f"({100 * self.total_bytes / max(self.limit_bytes, 1):.1f}%)",
        ]
        for stage, (count, size) in sorted(self.by_stage.items()):
            lines.append(f"  {stage}: {count} entr{'y' if count == 1 else 'ies'}, {size:,} bytes")
        return "\n".join(lines)


class BuildCache:
    """Entries keyed by a hex sha256 (see `tpuedge.shared_ir.cache_keys` for how keys are made)."""

    def __init__(self, directory: Path | str, limit_bytes: int = DEFAULT_SIZE_LIMIT):
        self.directory = Path(directory)
        self.limit_bytes = int(limit_bytes)

    @classmethod
    def default(cls, limit: str | int | None = None) -> "BuildCache":
        """The user's cache; `limit` (e.g. from config) is overridden by $TPUEDGE_CACHE_SIZE."""
        env = os.environ.get("TPUEDGE_CACHE_SIZE")
        if env:
            size = parse_size(env)
        elif limit is not None:
            size = parse_size(limit, "cache_size")
        else:
            size = DEFAULT_SIZE_LIMIT
        return cls(default_cache_dir(), size)

    @property
    def _root(self) -> Path:
        return self.directory / _LAYOUT

    def path_for(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"cache keys are hex sha256 digests, got {key!r}")
        return self._root / key[:2] / f"{key}{_SUFFIX}"

    # ---- entries -----------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        """The payload stored under `key` if it is intact (then marked as just used), else None."""
        return self.lookup(key)[0]

    def lookup(self, key: str) -> tuple[bytes | None, str]:
        """(payload, "hit") | (None, "absent") | (None, "damaged": the entry failed its check and was deleted)."""
        path = self.path_for(key)
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None, "absent"
        payload = _verified_payload(raw)
        if payload is None:
            self.discard(key)  # damaged: never served; the caller rebuilds and writes it again
            return None, "damaged"
        try:
            os.utime(path)  # least-recently-used eviction reads mtimes
        except FileNotFoundError:  # evicted by another process since we read it: still intact
            pass
        return payload, "hit"

    def stage_of(self, path: Path) -> str:
        """The stage an entry file was written for (from its header)."""
        return _stage_of(Path(path))

    def discard(self, key: str) -> None:
        _unlink(self.path_for(key))

    def put(self, key: str, payload: bytes, *, stage: str) -> None:
        """Store `payload` atomically under `key`, then evict down to the size limit."""
        path = self.path_for(key)
        header = {
            "format": _MAGIC,
            "stage": stage,
            "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
        data = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        if len(data) > self.limit_bytes:
            return  # larger than the whole cache: caching it would evict everything else
        write_bytes_atomic(path, data)
        self.evict()

    # ---- housekeeping ------------------------------------------------------------------
    def _entry_files(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every entry; removes stale temp files on the way."""
        found = []
        if not self._root.is_dir():
            return found
        now = time.time()
        for folder in self._root.iterdir():
            if not folder.is_dir():
                continue
            for entry in os.scandir(folder):
                try:
                    st = entry.stat()
                except FileNotFoundError:  # deleted by another process meanwhile
                    continue
                if entry.name.endswith(_SUFFIX):
                    found.append((st.st_mtime, st.st_size, Path(entry.path)))
                elif entry.name.startswith(".") and now - st.st_mtime > _STALE_TEMP_SECONDS:
                    _unlink(Path(entry.path))
        return found

    def evict(self) -> int:
        """Delete least recently used entries until the total fits the limit; returns bytes freed."""
        entries = self._entry_files()
        total = sum(size for _, size, _ in entries)
        freed = 0
        for _, size, path in sorted(entries, key=lambda e: (e[0], e[2].name)):
            if total - freed <= self.limit_bytes:
                break
            _unlink(path)
            freed += size
        return freed

    def info(self) -> CacheInfo:
        by_stage: dict[str, list[int]] = {}
        entries = self._entry_files()
        for _, size, path in entries:
            stage = _stage_of(path)
            counts = by_stage.setdefault(stage, [0, 0])
            counts[0] += 1
            counts[1] += size
        return CacheInfo(
            self.directory,
            len(entries),
            sum(size for _, size, _ in entries),
            self.limit_bytes,
            {k: (v[0], v[1]) for k, v in by_stage.items()},
        )

    def clear(self) -> tuple[int, int]:
        """Delete every entry; returns (entries, bytes) removed."""
        entries = self._entry_files()
        if self._root.exists():
            shutil.rmtree(self._root, ignore_errors=True)
        return len(entries), sum(size for _, size, _ in entries)


def _verified_payload(raw: bytes) -> bytes | None:
    head, sep, payload = raw.partition(b"\n")
    if not sep:
        return None
    try:
        header = json.loads(head)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(header, dict) or header.get("format") != _MAGIC:
        return None
    if header.get("bytes") != len(payload) or header.get("sha256") != hashlib.sha256(payload).hexdigest():
        return None
    return payload


def _stage_of(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
        return str(header.get("stage", "unknown"))
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return "unreadable"


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
