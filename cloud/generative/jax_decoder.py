"""A captured decoder's prefill and decode entries in JAX, over a batch of sequences.

Each entry of the bundle (shared_ir/generative/capture.py) is one sequence's step: tokens
[1, T], input_pos [T], caches [1, kv_heads, positions, head_dim]. `JaxDecoder` lowers every
entry with the cloud interpreter (the weights converted once, shared by all entries) and
vmaps it over a leading batch axis, so each row of a batch is its own sequence at its own
positions: rows join, decode and leave independently (continuous batching,
shared_ir/generative/batch_engine.py). Two jitted steps, the batched cache donated to both:

    prefill(cache, slot, entry, tokens [1, n], input_pos [1, n]) -> cache
        one sequence's prompt chunk written into row `slot` of the batched cache;
    decode(cache, tokens [B, 1], input_pos [B, 1]) -> (logits [B, vocab], greedy [B], cache)
        one new token for every row.

With a serving mesh (cloud/generative/serving_mesh.py) the weights, the KV heads and the batch
are placed on it and XLA partitions both steps; the numbers are one device's.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.cloud.generative.serving_mesh import batch_spec, cache_spec, parse_serving_mesh, weight_spec
from tpuedge.cloud.interpreter import to_jax
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.decoder import DECODE

__all__ = ["JaxDecoder", "JaxStepRunner", "batched_step", "DECODE_ROW"]

DECODE_ROW = "decode_row"


def tied_names(params: dict) -> tuple[dict, dict[str, str]]:
    """(each array once under its first name, {other name: that first name}): a tied embedding
    table and LM head are one array, passed to the steps, exported and stored once."""
    first: dict[int, str] = {}
    unique, aliases = {}, {}
    for name, value in params.items():
        if id(value) in first:
            aliases[name] = first[id(value)]
        else:
            first[id(value)] = name
            unique[name] = value
    return unique, aliases


def batched_step(jax_program, entry: str, aliases: dict[str, str] | None = None):
    """One entry's pure step over a batch: (params, buffers, tokens [B, T], input_pos [B, T],
    cache tuple of [B, ...]) -> (logits [B, T, vocab] or None for a prefill entry, cache tuple).
    `params` holds a tied array once; `aliases` names it again for the graph."""

    def one(params, buffers, tokens, input_pos, cache):
        params = {**params, **{alias: params[name] for alias, name in (aliases or {}).items()}}
        _, outputs = jax_program(params, buffers, tokens[None], input_pos, *(c[None] for c in cache))
        new_cache = tuple(c[0] for c in outputs[-len(cache) :])
        return (outputs[0][0] if entry == DECODE else None), new_cache

    return jax.vmap(one, in_axes=(None, None, 0, 0, 0))


def decode_fn(step):
    def decode(params, buffers, cache, tokens, input_pos):
        logits, cache = step(params, buffers, tokens, input_pos, cache)
        last = logits[:, -1].astype(jnp.float32)
        return last, jnp.argmax(last, axis=-1).astype(jnp.int32), cache

    return decode


def prefill_fn(step, row_shardings=None):
    """`row_shardings`: where one row of each cache lives on a mesh (replicated over "data", its
    heads split over "model"), so XLA moves the row once instead of re-partitioning every op."""

    def prefill(params, buffers, cache, slot, tokens, input_pos):
        rows = tuple(jax.lax.dynamic_slice_in_dim(c, slot, 1, 0) for c in cache)
        if row_shardings is not None:
            rows = tuple(jax.lax.with_sharding_constraint(r, s) for r, s in zip(rows, row_shardings))
        _, rows = step(params, buffers, tokens, input_pos, rows)
        return tuple(jax.lax.dynamic_update_slice_in_dim(c, r, slot, 0) for c, r in zip(cache, rows))

    return prefill


class JaxDecoder:
    """A decoder bundle lowered to JAX (see the module docstring)."""

    def __init__(self, bundle, *, mesh: Any = None):
        if bundle.decoder is None:
            raise UserError(f"{bundle.name} is a bucket bundle, not a decoder: it has no prefill and decode to serve.")
        self.name = bundle.name
        self.spec = bundle.decoder
        self.tokenizer = bundle.tokenizer
        first = None
        self.programs = {}
        for entry in self.spec.entry_names:
            self.programs[entry] = to_jax(bundle.entries[entry], weights_from=first)
            first = first or self.programs[entry]
        self.mesh = parse_serving_mesh(mesh)
        unique, self.aliases = tied_names(first.params)
        self.params = self._place_weights(unique)
        self.buffers = {entry: self._replicate(p.buffers) for entry, p in self.programs.items()}
        for program in self.programs.values():  # the entries' own copies would pin unsharded weights
            program.params = {}
        self._jitted: dict[str, Any] = {}

    # ---- placement ------------------------------------------------------------------------
    def _place_weights(self, params: dict) -> dict:
        if self.mesh is None:
            return params
        from jax.sharding import NamedSharding

        return {
            name: jax.device_put(value, NamedSharding(self.mesh, weight_spec(self.mesh, name, tuple(value.shape))))
            for name, value in params.items()
        }

    def _replicate(self, tree: dict) -> dict:
        if self.mesh is None:
            return tree
        from jax.sharding import NamedSharding, PartitionSpec

        return jax.device_put(tree, NamedSharding(self.mesh, PartitionSpec()))

    def _cache_shardings(self, batch: int):
        from jax.sharding import NamedSharding

        return tuple(
            NamedSharding(self.mesh, cache_spec(self.mesh, (batch, *shape[1:]))) for shape in self.spec.cache_shapes
        )

    def _row_shardings(self):
        if self.mesh is None:
            return None
        from jax.sharding import NamedSharding

        return tuple(
            NamedSharding(self.mesh, cache_spec(self.mesh, (1, *shape[1:]), split_batch=False))
            for shape in self.spec.cache_shapes
        )

    def new_cache(self, batch: int) -> tuple:
        """Zero caches for `batch` sequences: [batch, kv_heads, positions, head_dim] each."""
        dtype = jnp.dtype(self.spec.cache_dtype)
        zeros = tuple(jnp.zeros((batch, *shape[1:]), dtype) for shape in self.spec.cache_shapes)
        if self.mesh is None:  # committed, as the steps' outputs are: the next call reuses their compile
            return tuple(jax.device_put(z, jax.devices()[0]) for z in zeros)
        return tuple(jax.device_put(z, s) for z, s in zip(zeros, self._cache_shardings(batch)))

    def rows(self, values: np.ndarray, *, split: bool = True):
        """tokens / input_pos [B, T] on the device(s): the batch split like the cache's, or
        (`split=False`, one sequence's prefill) replicated."""
        array = jnp.asarray(np.asarray(values, np.int32))
        if self.mesh is None:
            return array
        from jax.sharding import NamedSharding, PartitionSpec

        spec = batch_spec(self.mesh, array.shape[0], array.ndim) if split else PartitionSpec()
        return jax.device_put(array, NamedSharding(self.mesh, spec))

    # ---- the two steps ---------------------------------------------------------------------
    def _step(self, kind: str, entry: str):
        """kind "batch": the decode step over every row; kind "slot": `entry` (a prefill entry,
        or decode when a prompt's end has no prefill entry that fits) written into one row."""
        key = (kind, entry)
        if key not in self._jitted:
            if entry not in self.programs:
                raise UserError(f"{self.name} has no entry {entry!r}; its entries are {', '.join(self.programs)}.")
            step = batched_step(self.programs[entry], entry, self.aliases)
            function = decode_fn(step) if kind == "batch" else prefill_fn(step, self._row_shardings())
            self._jitted[key] = jax.jit(function, donate_argnums=(2,))
        return self._jitted[key]

    def prefill(self, cache: tuple, slot: int, entry: str, tokens, input_pos) -> tuple:
        return self._step("slot", entry)(
            self.params,
            self.buffers[entry],
            cache,
            jnp.int32(slot),
            self.rows(tokens, split=False),
            self.rows(input_pos, split=False),
        )

    def decode(self, cache: tuple, tokens, input_pos):
        return self._step("batch", DECODE)(
            self.params, self.buffers[DECODE], cache, self.rows(tokens), self.rows(input_pos)
        )

    # ---- what the exporter and the memory plan need ------------------------------------------
    def pure_steps(self) -> dict[str, Any]:
        """The un-jitted steps by export name: "decode" (every row), each prefill entry into one
        row, and "decode_row" (decode into one row: a prompt's end where no prefill entry fits)."""
        steps = {entry: batched_step(program, entry, self.aliases) for entry, program in self.programs.items()}
        named = {entry: (decode_fn if entry == DECODE else prefill_fn)(step) for entry, step in steps.items()}
        named[DECODE_ROW] = prefill_fn(steps[DECODE])
        return named

    @cached_property
    def weight_bytes(self) -> int:
        return sum(int(v.size) * v.dtype.itemsize for v in self.params.values())

    def step_runner(self):
        return JaxStepRunner(self)


class JaxStepRunner:
    """One sequence through a decoder's steps: the StepRunner of shared_ir/generative/generation.py
    (the cache stays on the device between steps)."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.prefill_lengths = decoder.spec.prefill_lengths
        self.cache_length = decoder.spec.cache_length

    def initial_cache(self) -> list:
        return list(self.decoder.new_cache(1))

    def run(self, entry: str, tokens, input_pos, cache):
        input_pos = np.asarray(input_pos, np.int32).reshape(1, -1)
        if entry == DECODE:
            logits, _, cache = self.decoder.decode(tuple(cache), tokens, input_pos)
            return np.asarray(logits)[:, None, :], list(cache)
        return None, list(self.decoder.prefill(tuple(cache), 0, entry, tokens, input_pos))
