"""Coverage of a target, derived from its registry (never hand-written)."""

from __future__ import annotations

from dataclasses import dataclass

from tpuedge.shared_ir.targets import get_target

__all__ = ["CoverageRow", "coverage", "core_aten_ops"]


@dataclass(frozen=True)
class CoverageRow:
    op: str
    core: bool
    supported: bool
    note: str = ""


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
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                keys.add(op_key(op))
    return sorted(keys)


def coverage(target_name: str) -> list[CoverageRow]:
    cap = get_target(target_name).capability()
    core = core_aten_ops()
    rows = {
        op: CoverageRow(op, True, cap.ops.supports(op), cap.notes.get(op, "")) for op in core
    }
    for key in cap.ops.keys():
        if key not in rows:
            rows[key] = CoverageRow(key, False, True, cap.notes.get(key, ""))
    return sorted(rows.values(), key=lambda r: r.op)
