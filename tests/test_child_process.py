"""edge/mcu/child_process.py: a child started ahead (a spare) runs an entry as a fresh one does, is
the one used when it waits, is replaced by a fresh one when it died, and does not outlive its block."""

from __future__ import annotations

import signal
import textwrap

import pytest

from tpuedge.edge.mcu import child_process

_ENTRIES = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path

    def report():
        folder = Path(sys.argv[1])
        (folder / "answer.txt").write_text(" ".join([str(os.getpid()), str("json" in sys.modules), *sys.argv[2:]]))
        print("to stderr", file=sys.stderr)
        print("to stdout, dropped")

    def abort():
        os.kill(os.getpid(), signal.SIGABRT)

    import signal
    """
)


@pytest.fixture
def entries(tmp_path, monkeypatch):
    """A module of entries on the children's PYTHONPATH (read when each child starts)."""
    (tmp_path / "child_entries_for_test.py").write_text(_ENTRIES)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def _answer(folder):
    pid, preloaded, *args = (folder / "answer.txt").read_text().split()
    return int(pid), preloaded == "True", args


def test_an_entry_runs_in_a_fresh_child_with_its_args_and_stderr(entries):
    done = child_process.run_child("child_entries_for_test.report", entries, "a", "b")
    assert done.returncode == 0 and done.stderr.strip() == "to stderr"
    pid, _, args = _answer(entries)
    assert args == ["a", "b"]


def test_a_spare_started_ahead_is_the_child_that_runs_the_entry(entries):
    with child_process.spare_children(1, preload=("json",)):
        waiting = child_process._blocks[-1].waiting
        done = child_process.run_child("child_entries_for_test.report", entries, "x")
    assert done.returncode == 0 and done.stderr.strip() == "to stderr"
    pid, preloaded, args = _answer(entries)
    assert pid == waiting.proc.pid and preloaded and args == ["x"]


def test_the_next_spare_starts_when_one_is_taken_and_none_outlives_the_block(entries):
    with child_process.spare_children(2):
        first = child_process._blocks[-1].waiting
        child_process.run_child("child_entries_for_test.report", entries)
        second = child_process._blocks[-1].waiting
        assert second is not None and second is not first
        assert _answer(entries)[0] == first.proc.pid
        child_process.run_child("child_entries_for_test.report", entries)
        assert _answer(entries)[0] == second.proc.pid
        assert child_process._blocks[-1].waiting is None  # the block asked for two
    with child_process.spare_children(2):
        unused = child_process._blocks[-1].waiting
    assert unused.proc.poll() is not None and not child_process._blocks  # ended with its block


def test_a_spare_that_died_is_replaced_by_a_fresh_child(entries):
    with child_process.spare_children(1):
        dead = child_process._blocks[-1].waiting
        dead.proc.kill()
        dead.proc.wait()
        done = child_process.run_child("child_entries_for_test.report", entries, "y")
    assert done.returncode == 0
    pid, _, args = _answer(entries)
    assert pid != dead.proc.pid and args == ["y"]


@pytest.mark.parametrize("spare", [False, True])
def test_a_child_killed_by_a_signal_reports_it(entries, spare):
    if spare:
        with child_process.spare_children(1):
            done = child_process.run_child("child_entries_for_test.abort", entries)
    else:
        done = child_process.run_child("child_entries_for_test.abort", entries)
    assert done.returncode == -signal.SIGABRT
