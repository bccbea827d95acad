"""No stage mutates its input: checking and lowering for every target leave the shared IR
exactly as captured (same graph, same weights, same fingerprint)."""

from __future__ import annotations

import pytest

import tpuedge
from models import build_transformer
from tpuedge.shared_ir.fingerprint import fingerprint
from tpuedge.shared_ir.targets import all_targets


@pytest.fixture(scope="module")
def program():
    return tpuedge.export(*build_transformer(), name="transformer")


@pytest.mark.parametrize("target", list(all_targets()))
def test_check_and_lower_leave_the_ir_untouched(program, target):
    before = fingerprint(program.exported_program)
    assert before == program.fingerprint
    program.check(target)
    program.rewrites(target)
    options = {}
    if any(o.name == "calibration" for o in all_targets()[target].build_options()):
        options["calibration"] = [tuple(sample) for sample in program.example_inputs(count=32)]
    lowered = program.lower(target, **options)
    assert lowered.as_text()
    assert fingerprint(program.exported_program) == before
