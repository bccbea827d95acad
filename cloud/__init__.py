"""Cloud backend: the shared IR lowered op by op to JAX; training on XLA (TPU/CPU/GPU), StableHLO export."""

__all__: list[str] = []
