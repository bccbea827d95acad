"""The `android` target (light module: no litert import at module level)."""

from __future__ import annotations

from tpuedge.shared_ir.targets import Capability, Target

__all__ = ["AndroidTarget"]


class AndroidTarget(Target):
    name = "android"
    summary = "quantized LiteRT flatbuffer for phones (LiteRT interpreter)"
    runtime = "LiteRT interpreter (ai_edge_litert)"
    implemented = False

    def capability(self) -> Capability:
        from tpuedge.edge.capability import android_capability

        return android_capability()
