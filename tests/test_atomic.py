"""Atomic writes: a finished file replaces the old one whole, readable as any written file is."""

from __future__ import annotations

import stat

import pytest

from tpuedge.shared_ir.atomic import atomic_write_path, write_bytes_atomic


def test_a_written_file_is_readable_by_everyone_not_owner_only(tmp_path):
    path = tmp_path / "out" / "weights.bin"
    write_bytes_atomic(path, b"abc")
    assert path.read_bytes() == b"abc"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["weights.bin"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_write_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("failed mid-write")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
