"""Registers the edge targets. `android` and `mcu` differ by capability data, not by copies."""

from tpuedge.edge.android_target import AndroidTarget
from tpuedge.edge.mcu_target import McuTarget
from tpuedge.shared_ir.targets import register_target

__all__ = ["AndroidTarget", "McuTarget"]

register_target(AndroidTarget())
register_target(McuTarget())
