"""Coverage of a target, derived from its registry (never hand-written)."""

from __future__ import annotations

from dataclasses import dataclass

from tpuedge.shared_ir.targets import get_target
from tpuedge.shared_ir.torch_compat import is_op_packet

__all__ = ["CoverageRow", "coverage", "core_aten_ops"]


@dataclass(frozen=True)
class CoverageRow:
    op: str
    core: bool
    supported: bool
    note: str = ""
    rewritten: bool = False  # not lowered as it is: the target's IR passes rewrite it (some forms)


def core_aten_ops() -> list[str]:
    """Every core-ATen overload torch knows, as "aten.name.overload"."""
    import torch

    from tpuedge.shared_ir.op_registry import op_key

    keys = set()
    for name in dir(torch.ops.aten):
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):
            continue
        if not is_op_packet(packet):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                keys.add(op_key(op))
    return sorted(keys)


def coverage(target_name: str) -> list[CoverageRow]:
    from tpuedge.shared_ir.op_registry import packet_key

    cap = get_target(target_name).capability()
    core = core_aten_ops()
    rows = {}
    for op in core:
        supported = cap.ops.supports(op)
        rewrite = "" if supported else cap.rewritten.get(packet_key(op), "")
        rows[op] = CoverageRow(op, True, supported, cap.notes.get(op, "") or rewrite, rewritten=bool(rewrite))
    for key in cap.ops.keys():
        if key not in rows:
            rows[key] = CoverageRow(key, False, True, cap.notes.get(key, ""))
    for packet, rewrite in cap.rewritten.items():  # an op only a rewrite takes, core or not
        if not cap.ops.supports(packet) and not any(packet_key(op) == packet for op in rows):
            rows[packet] = CoverageRow(packet, False, False, rewrite, rewritten=True)
    return sorted(rows.values(), key=lambda r: r.op)
