"""Per-layer values of a cloud-tpu artifact: its own model.layers.jaxexport with its own weights.

The build exports a second function beside the forward, `layers(params, buffers, *inputs)`,
returning every IR layer's value keyed by the captured program's node name (see
cloud/layer_export.py). Running it on XLA:CPU with the folder's model.safetensors shows what
the shipped artifact computes layer by layer: weights changed after the build show up here.
"""

from __future__ import annotations

import numpy as np

from tpuedge.shared_ir.ir_values import IRLayer

__all__ = ["CloudLayerSource"]


class CloudLayerSource:
    def __init__(self, artifact, layers: dict[str, IRLayer]):
        from tpuedge.cloud.layer_export import LAYERS_FILE
        from tpuedge.shared_ir.errors import UserError

        if not artifact.manifest.get("layers"):
            raise UserError(
                f"{artifact.directory} records no exported layers (built by an older tpuedge), so its per-layer values "
                "can't be read from the artifact; rebuild it with `tpuedge build --target cloud-tpu`."
            )
        self._artifact = artifact
        self._layers = layers
        self._file = LAYERS_FILE
        exported = set((artifact.manifest.get("layers") or {}).get("nodes") or ())
        self._names = [name for name in layers if name in exported and not layers[name].is_input]

    def prepare(self, reference: dict[str, np.ndarray], inputs: list[np.ndarray]) -> None:
        """Nothing to settle: the exported function keys values by the IR's node names."""

    def names(self) -> dict[str, str]:
        return {name: f"{self._file}:{name}" for name in self._names}

    def counterparts(self) -> set[str]:
        """Every layer the build exported holds its IR node's value by name."""
        return set(self._names)

    def values(self, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        record = self._artifact.layer_values(*inputs)
        return {name: np.asarray(record[name], dtype=np.float64) for name in self._names if name in record}
