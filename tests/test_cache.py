"""The build cache's store and keys: atomic entries, damage detection, LRU eviction, content keys."""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest

from tpuedge.shared_ir.cache import BuildCache, default_cache_dir, parse_size
from tpuedge.shared_ir.cache_keys import (
    build_session,
    cache_key,
    cached_stage,
    data_digest,
    decode_array_tree,
    encode_array_tree,
    read_cache_line,
)
from tpuedge.shared_ir.errors import UserError


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_round_trip_and_entry_records_its_sha256(tmp_path):
    store = BuildCache(tmp_path)
    store.put(_key("a"), b"payload bytes", stage="unit")
    assert store.get(_key("a")) == b"payload bytes"
    header = store.path_for(_key("a")).read_bytes().split(b"\n", 1)[0]
    assert hashlib.sha256(b"payload bytes").hexdigest().encode() in header
    assert store.get(_key("b")) is None
    assert [p.name for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith(".")] == []  # no temp left


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "empty"])
def test_damaged_entry_is_never_served_and_is_deleted(tmp_path, damage):
    store = BuildCache(tmp_path)
    key = _key("x")
    store.put(key, bytes(range(256)) * 10, stage="unit")
    path = store.path_for(key)
    raw = path.read_bytes()
    if damage == "truncate":
        raw = raw[:-100]
    elif damage == "flip":
        raw = raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:]
    elif damage == "header":
        raw = b"garbage" + raw
    else:
        raw = b""
    path.write_bytes(raw)
    assert store.lookup(key) == (None, "damaged")
    assert not path.exists()
    assert store.lookup(key) == (None, "absent")


def test_cached_stage_rebuilds_a_damaged_entry_and_reports_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path))
    builds = []

    def build():
        builds.append(1)
        return b"the real bytes"

    with build_session() as first:
        assert cached_stage("unit", {"n": 1}, build) == b"the real bytes"
    with build_session() as second:
        assert cached_stage("unit", {"n": 1}, build) == b"the real bytes"
    assert len(builds) == 1
    assert [r.outcome for r in first.stages + second.stages] == ["miss", "hit"]
    (entry,) = list(tmp_path.rglob("*.entry"))
    entry.write_bytes(entry.read_bytes()[:-3] + b"BAD")
    with build_session() as third:
        assert cached_stage("unit", {"n": 1}, build) == b"the real bytes"
    assert len(builds) == 2 and [r.outcome for r in third.stages] == ["rebuilt"]
    assert "rebuilt unit" in third.describe()
    with build_session(enabled=False) as off:
        assert cached_stage("unit", {"n": 1}, build) == b"the real bytes"
    assert len(builds) == 3 and off.stages == [] and "off" in off.describe()


def test_the_cache_line_reads_back_as_the_session_recorded_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path))
    with build_session() as cold:
        for n in (1, 2, 3):
            cached_stage("candidate", {"n": n}, lambda: b"x")
        cached_stage("float", {}, lambda: b"y")
    with build_session() as warm:
        cached_stage("float", {}, lambda: b"y")
        cached_stage("check", {}, lambda: b"z")
    assert read_cache_line(cold.describe()) == {"miss": ["candidate x3", "float"]}
    assert read_cache_line(warm.describe()) == {"hit": ["float"], "miss": ["check"]}
    assert read_cache_line(f"cache: hit build ({tmp_path})") == {"hit": ["build"]}  # a replayed build's line
    with build_session(enabled=False) as off:
        pass
    with build_session() as idle:
        pass
    assert read_cache_line(off.describe()) == read_cache_line(idle.describe()) == {}


def test_least_recently_used_entries_are_evicted_first(tmp_path):
    store = BuildCache(tmp_path, limit_bytes=10_000)
    keys = [_key(str(i)) for i in range(4)]
    for i, key in enumerate(keys[:3]):
        store.put(key, bytes(3000), stage="unit")
        os.utime(store.path_for(key), (time.time() - 100 + i, time.time() - 100 + i))
    assert store.get(keys[0]) is not None  # a hit makes the oldest the most recently used
    store.put(keys[3], bytes(3000), stage="unit")  # 4 x ~3.1 KB > 10 KB: one must go
    assert store.get(keys[1]) is None  # the least recently used one
    assert all(store.get(k) is not None for k in (keys[0], keys[2], keys[3]))
    info = store.info()
    assert info.entries == 3 and info.total_bytes <= 10_000 and info.by_stage["unit"][0] == 3
    assert store.clear() == (3, info.total_bytes) and store.info().entries == 0


def test_an_entry_larger_than_the_limit_is_not_stored(tmp_path):
    store = BuildCache(tmp_path, limit_bytes=1000)
    store.put(_key("small"), bytes(100), stage="unit")
    store.put(_key("big"), bytes(5000), stage="unit")
    assert store.get(_key("big")) is None and store.get(_key("small")) == bytes(100)


def test_location_and_size_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TPUEDGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "tpuedge"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tpuedge"
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    assert parse_size("2G") == 2 * 1024**3 and parse_size("500M") == 500 * 1024**2 and parse_size("1234") == 1234
    assert parse_size("1.5GiB") == int(1.5 * 1024**3)
    monkeypatch.setenv("TPUEDGE_CACHE_SIZE", "10K")
    assert BuildCache.default("1G").limit_bytes == 10 * 1024
    monkeypatch.setenv("TPUEDGE_CACHE_SIZE", "lots")
    with pytest.raises(UserError, match="TPUEDGE_CACHE_SIZE='lots' is not a size"):
        BuildCache.default()


def test_data_digest_covers_bytes_dtype_and_shape_not_where_data_came_from():
    a = [[np.arange(6, dtype=np.float32).reshape(2, 3)]]
    same = [[np.arange(6, dtype=np.float32).reshape(2, 3).copy()]]
    assert data_digest(a) == data_digest(same)
    assert data_digest(a) != data_digest([[np.arange(6, dtype=np.float32).reshape(3, 2)]])
    assert data_digest(a) != data_digest([[np.arange(6, dtype=np.float64).reshape(2, 3)]])
    changed = [[a[0][0].copy()]]
    changed[0][0][1, 2] = 7.5
    assert data_digest(a) != data_digest(changed)
    assert data_digest(None) is None
    assert cache_key("s", {"data": data_digest(a)}) == cache_key("s", {"data": data_digest(same)})
    assert cache_key("s", {"data": data_digest(a)}) != cache_key("t", {"data": data_digest(a)})


def test_array_tree_round_trips_exactly():
    tree = {"t1": {"min": np.array([-1.5, 2.0], np.float32), "max": np.float32(3.25)}, "n": [1, "x", None, (2.5,)]}
    back = decode_array_tree(encode_array_tree(tree))
    np.testing.assert_array_equal(back["t1"]["min"], tree["t1"]["min"])
    assert back["t1"]["min"].dtype == np.float32 and back["t1"]["max"] == np.float32(3.25)
    assert isinstance(back["t1"]["max"], np.float32) and back["n"] == [1, "x", None, (2.5,)]


def test_program_run_remembers_outputs_of_the_same_inputs():
    """A build runs the float reference on the same samples in the search and in the verification."""
    import models  # examples/models.py

    import tpuedge

    module, args = models.build_mlp()
    program = tpuedge.export(module, args, name="mlp")
    calls = []
    runnable = program._runnable_module()
    program.__dict__["_module_cache"] = lambda *t: calls.append(1) or runnable(*t)
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    first = program.run(x)
    first[0][...] = 0  # the caller's copy, not the remembered one
    again = program.run(x.copy())
    np.testing.assert_array_equal(again[0], module(__import__("torch").from_numpy(x)).detach().numpy())
    assert len(calls) == 1
    program.run(x + 1)
    assert len(calls) == 2


def test_tpuedge_no_cache_turns_the_cache_off_in_build_sessions_too(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")
    with build_session() as session:
        assert cached_stage("unit", {"n": 2}, lambda: b"x") == b"x"
    assert session.cache is None and not list(tmp_path.rglob("*.entry"))
