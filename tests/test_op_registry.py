"""The one op lookup order: exact overload, a packet's ".default" when asked by packet name, and a
packet only when the packet itself was registered. A sibling overload never counts as lowered."""

from __future__ import annotations

import pytest

from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.op_registry import OpRegistry


def _table() -> OpRegistry:
    table = OpRegistry("toy")
    table.add("aten.atan2.default", "atan2")
    table.add("aten.relu", "every relu overload")
    return table


def test_exact_overload_and_registered_packet_match():
    table = _table()
    assert table.lookup("aten.atan2.default") == "atan2"
    assert table.lookup("aten.relu.default") == "every relu overload"
    assert table.lookup("aten.relu.out") == "every relu overload"  # the packet was registered
    assert table.lookup("aten.atan2") == "atan2"  # a packet asked by name: its .default


@pytest.mark.parametrize("sibling", ["aten.atan2.out", "aten.atan2.Scalar"])
def test_a_sibling_overload_is_not_supported(sibling):
    assert _table().lookup(sibling) is None
    assert sibling not in _table()


def test_duplicate_registration_is_an_error():
    table = _table()
    with pytest.raises(InternalError, match="registered twice"):
        table.add("aten.relu", "again")


def test_cloud_coverage_lists_only_what_the_interpreter_lowers():
    """`tpuedge ops/check --target cloud-tpu` agree with the table: aten.atan2.out is not lowered."""
    import torch

    from tpuedge.cloud.lowerings import LOWERINGS
    from tpuedge.shared_ir.coverage import coverage
    from tpuedge.shared_ir.op_registry import packet_key

    assert "aten.atan2.default" in LOWERINGS.keys()
    assert not LOWERINGS.supports(torch.ops.aten.atan2.out)
    registered = set(LOWERINGS.keys())
    for row in coverage("cloud-tpu"):
        if row.supported:
            assert row.op in registered or packet_key(row.op) in registered, row.op
    assert {r.op: r.supported for r in coverage("cloud-tpu")}.get("aten.atan2.out") is False
