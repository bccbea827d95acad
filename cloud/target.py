"""The `cloud-tpu` target (light module: no jax import here)."""

from __future__ import annotations

from tpuedge.shared_ir.targets import Capability, Target, register_target

__all__ = ["CloudTpuTarget"]


class CloudTpuTarget(Target):
    name = "cloud-tpu"
    summary = "JAX/StableHLO for XLA on Cloud TPU (runs on CPU/GPU the same way)"
    runtime = "XLA (jax.export)"
    implemented = False

    def capability(self) -> Capability:
        from tpuedge.cloud.capability import cloud_capability

        return cloud_capability()


register_target(CloudTpuTarget())
