"""Every test slow_tests.txt names exists: a renamed test would otherwise leave the list quietly
and start running in CI (or a deleted one linger in it)."""

from __future__ import annotations

import re

from conftest import ROOT, SLOW_TESTS


def test_every_listed_slow_test_exists():
    missing = []
    for line in SLOW_TESTS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        path, _, name = line.partition("::")
        function = re.sub(r"\[.*\]$", "", name)
        source = ROOT / path
        if not source.is_file() or not re.search(rf"^def {re.escape(function)}\(", source.read_text(), re.MULTILINE):
            missing.append(line)
    assert not missing, missing
