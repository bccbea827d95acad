"""The `mcu` target (light module: no litert/tflite_micro import at module level)."""

from __future__ import annotations

from tpuedge.shared_ir.targets import Capability, Target

__all__ = ["McuTarget"]


class McuTarget(Target):
    name = "mcu"
    summary = "full-int8 LiteRT flatbuffer + C array for microcontrollers (TFLite-Micro)"
    runtime = "TFLite-Micro interpreter (tflite_micro)"
    implemented = False

    def capability(self) -> Capability:
        from tpuedge.edge.mcu_capability import mcu_capability

        return mcu_capability()
