"""mcu capability: placeholder until the TFLite-Micro op data lands (empty registry)."""

from tpuedge.shared_ir.op_registry import OpRegistry
from tpuedge.shared_ir.targets import Capability

__all__ = ["mcu_capability"]


def mcu_capability() -> Capability:
    return Capability(target="mcu", ops=OpRegistry("mcu"))
