"""The `android` target (light module: no litert import at module level)."""

from __future__ import annotations

from tpuedge.shared_ir.op_registry import OpRegistry
from tpuedge.shared_ir.targets import Capability, Target

__all__ = ["AndroidTarget"]


class AndroidTarget(Target):
    name = "android"
    summary = "quantized LiteRT flatbuffer for phones (LiteRT interpreter)"
    runtime = "LiteRT interpreter (ai_edge_litert)"
    implemented = False

    def capability(self) -> Capability:
        return Capability(target=self.name, ops=OpRegistry(self.name))
