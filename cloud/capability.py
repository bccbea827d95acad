"""cloud-tpu capability: placeholder until the ATen->JAX table lands (empty registry)."""

from tpuedge.shared_ir.op_registry import OpRegistry
from tpuedge.shared_ir.targets import Capability

__all__ = ["cloud_capability"]


def cloud_capability() -> Capability:
    return Capability(target="cloud-tpu", ops=OpRegistry("cloud-tpu"))
