"""The `android` and `mcu` targets (light module: no litert import here).

They differ by capability data, not by copies of code.
"""

from __future__ import annotations

from tpuedge.shared_ir.op_registry import OpRegistry
from tpuedge.shared_ir.targets import Capability, Target, register_target

__all__ = ["AndroidTarget", "McuTarget"]


class AndroidTarget(Target):
    name = "android"
    summary = "quantized LiteRT flatbuffer for phones (LiteRT interpreter)"
    runtime = "LiteRT interpreter (ai_edge_litert)"
    implemented = False

    def capability(self) -> Capability:
        return Capability(target=self.name, ops=OpRegistry(self.name))


class McuTarget(Target):
    name = "mcu"
    summary = "full-int8 LiteRT flatbuffer + C array for microcontrollers (TFLite-Micro)"
    runtime = "TFLite-Micro interpreter (tflite_micro)"
    implemented = False

    def capability(self) -> Capability:
        return Capability(target=self.name, ops=OpRegistry(self.name))


register_target(AndroidTarget())
register_target(McuTarget())
