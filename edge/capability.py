"""android capability: placeholder until the edge lowering registry lands (empty registry)."""

from tpuedge.shared_ir.op_registry import OpRegistry
from tpuedge.shared_ir.targets import Capability

__all__ = ["android_capability"]


def android_capability() -> Capability:
    return Capability(target="android", ops=OpRegistry("android"))
