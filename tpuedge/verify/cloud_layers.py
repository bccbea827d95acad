"""Per-layer values of the cloud backend: the JAX interpreter's intermediates of the same IR.

`to_jax(program).intermediates(params, buffers, *inputs)` keys each value by the captured
program's node name, so no name mapping is needed; the weights are the Program's (the
artifact was checked to carry the same IR fingerprint).
"""

from __future__ import annotations

import numpy as np

from tpuedge.verify.ir_values import IRLayer

__all__ = ["CloudLayerSource"]


class CloudLayerSource:
    def __init__(self, program, layers: dict[str, IRLayer]):
        from tpuedge.cloud.interpreter import to_jax

        self._jax = to_jax(program)
        self._layers = layers

    def prepare(self, reference: dict[str, np.ndarray], inputs: list[np.ndarray]) -> None:
        """Nothing to settle: the interpreter keys values by the IR's node names."""

    def names(self) -> dict[str, str]:
        return {name: f"jax:{name}" for name in self._layers}

    def values(self, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        record = self._jax.intermediates(self._jax.params, self._jax.buffers, *inputs)
        out = {}
        for name, layer in self._layers.items():
            if layer.is_input:
                continue
            value = record.get(name)
            if value is not None and hasattr(value, "shape"):
                out[name] = np.asarray(value, dtype=np.float64)
        return out
