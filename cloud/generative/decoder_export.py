"""A decoder's steps as `jax.export` blobs, and the steps run back from them.

`export_steps(decoder)` exports every entry's step (jax_decoder.py: decode over a batch, each
prefill entry into one row) for CPU, GPU and TPU, with the batch as a symbolic dimension `b`: one
artifact serves any batch size. `ExportedSteps` runs them with the artifact's weights and has
the JaxDecoder's interface (new_cache / prefill / decode / step_runner), so generation,
verification and continuous batching read an artifact as they read the bundle.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.cloud.generative.jax_decoder import DECODE_ROW, JaxStepRunner
from tpuedge.shared_ir.generative.decoder import DECODE

__all__ = ["export_steps", "ExportedSteps"]


def _abstract(tree):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def export_steps(decoder, platforms: tuple[str, ...] | None = None) -> dict[str, Any]:
    """export name (JaxDecoder.pure_steps) -> jax.export.Exported of that step, the batch symbolic."""
    from jax import export

    from tpuedge.cloud.stablehlo_export import PORTABLE_PLATFORMS, relocatable_locations

    (batch,) = export.symbolic_shape("b")
    spec = decoder.spec
    cache = tuple(jax.ShapeDtypeStruct((batch, *shape[1:]), jnp.dtype(spec.cache_dtype)) for shape in spec.cache_shapes)
    params = _abstract(decoder.params)
    exports = {}
    for entry, step in decoder.pure_steps().items():
        buffers = _abstract(decoder.buffers[DECODE if entry == DECODE_ROW else entry])
        jitted = jax.jit(step, donate_argnums=(2,))
        if entry == DECODE:
            rows = jax.ShapeDtypeStruct((batch, 1), jnp.int32)
            arguments = (params, buffers, cache, rows, rows)
        else:
            length = 1 if entry == DECODE_ROW else int(entry.rsplit("_", 1)[1])
            row = jax.ShapeDtypeStruct((1, length), jnp.int32)
            arguments = (params, buffers, cache, jax.ShapeDtypeStruct((), jnp.int32), row, row)
        with relocatable_locations():
            exports[entry] = export.export(jitted, platforms=platforms or PORTABLE_PLATFORMS)(*arguments)
    return exports


class ExportedSteps:
    """Exported steps with their weights: JaxDecoder's interface on one device."""

    def __init__(
        self, spec, exports: dict[str, Any], params: dict, buffers: dict[str, dict], name: str, tokenizer=None
    ):
        self.spec = spec
        self.name = name
        self.tokenizer = tokenizer
        self.params = {k: jnp.asarray(v) for k, v in params.items()}
        self.buffers = {entry: {k: jnp.asarray(v) for k, v in b.items()} for entry, b in buffers.items()}
        self.exports = dict(exports)
        self._calls = {name: jax.jit(exported.call, donate_argnums=(2,)) for name, exported in exports.items()}

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(self.exports[DECODE].platforms)

    def exported_text(self, name: str) -> str:
        """One step's StableHLO (weights are arguments, not constants)."""
        return self.exports[name].mlir_module()

    def new_cache(self, batch: int) -> tuple:
        dtype = jnp.dtype(self.spec.cache_dtype)
        # committed, as the steps' outputs are: the next call reuses their compile
        return tuple(
            jax.device_put(jnp.zeros((batch, *shape[1:]), dtype), jax.devices()[0]) for shape in self.spec.cache_shapes
        )

    def prefill(self, cache: tuple, slot: int, entry: str, tokens, input_pos) -> tuple:
        step, buffers = (DECODE_ROW, DECODE) if entry == DECODE else (entry, entry)
        return tuple(
            self._calls[step](
                self.params, self.buffers[buffers], cache, jnp.int32(slot), _ints(tokens), _ints(input_pos)
            )
        )

    def decode(self, cache: tuple, tokens, input_pos):
        logits, greedy, cache = self._calls[DECODE](
            self.params, self.buffers[DECODE], cache, _ints(tokens), _ints(input_pos)
        )
        return logits, greedy, tuple(cache)

    def step_runner(self):
        return JaxStepRunner(self)


def _ints(values) -> jax.Array:
    return jnp.asarray(np.asarray(values, np.int32))
