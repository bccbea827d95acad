"""The device mesh a decoder serves on: tensor-parallel weights and KV heads, a split batch.

Mesh specs: None (one device), "model:N" (each attention / MLP matrix and the KV cache's heads
split over N devices, Megatron-style), "data:D" (the batch of sequences split over D devices,
weights replicated), "data:D,model:N" (both), or a `jax.sharding.Mesh` with those axis names.

Where a weight is split follows its name in the captured program (transformers' names and the
usual GPT-2 ones): the matrices that fan out into heads or the MLP's hidden width
(q/k/v/gate/up projections) split their output features, the ones that fan back in (o/down
projections) their input features, the embedding and LM head their vocabulary; norms, biases of
the fan-in matrices and anything unnamed are replicated. Any split gives the same numbers (XLA
inserts the collectives it needs); the names only decide how much the devices talk.
"""

from __future__ import annotations

import re
from typing import Any


from tpuedge.shared_ir.errors import UserError

__all__ = ["SERVING_AXES", "parse_serving_mesh", "weight_spec", "cache_spec", "batch_spec"]

SERVING_AXES = ("data", "model")

# (pattern on the parameter name, dim of a 2-D weight that splits over "model")
_FAN_OUT = re.compile(r"(q_proj|k_proj|v_proj|gate_proj|up_proj|query|key|value|c_fc|fc1|w1|w3)\.weight$")
_FAN_OUT_BIAS = re.compile(r"(q_proj|k_proj|v_proj|gate_proj|up_proj|query|key|value|c_fc|fc1|w1|w3)\.bias$")
_FAN_IN = re.compile(r"(o_proj|down_proj|out_proj|dense|fc2|w2)\.weight$")
_VOCAB = re.compile(r"(embed_tokens|lm_head|wte|tok_embeddings|output)\.weight$")


def parse_serving_mesh(spec: Any, devices: Any = None):
    """None | "model:8" | "data:2,model:4" | Mesh -> Mesh (or None for one device)."""
    from jax.sharding import Mesh

    from tpuedge.cloud.mesh import mesh_from_spec

    if spec is None:
        return None
    if isinstance(spec, Mesh):
        bad = [a for a in spec.axis_names if a not in SERVING_AXES]
        if bad:
            raise UserError(
                f"Mesh axes {bad} are not understood for serving; name them 'data' (batch split) and/or 'model' "
                "(weights and KV heads split), e.g. Mesh(devices, ('model',))."
            )
        return spec
    return mesh_from_spec(spec, devices, SERVING_AXES, ("model:8", "data:2,model:4"))


def _ways(mesh, axis: str) -> int:
    return int(mesh.shape[axis]) if axis in mesh.axis_names else 1


def weight_spec(mesh, name: str, shape: tuple[int, ...]):
    """The PartitionSpec of one parameter (see the module docstring)."""
    from jax.sharding import PartitionSpec

    ways = _ways(mesh, "model")
    dims = [None] * len(shape)
    dim = None
    if ways > 1 and len(shape) == 2:
        if _FAN_OUT.search(name) or _VOCAB.search(name):
            dim = 0
        elif _FAN_IN.search(name):
            dim = 1
    elif ways > 1 and len(shape) == 1 and _FAN_OUT_BIAS.search(name):
        dim = 0
    if dim is not None and shape[dim] % ways == 0:
        dims[dim] = "model"
    return PartitionSpec(*dims)


def batch_spec(mesh, batch: int, rank: int, what: str = "the batch"):
    """Dim 0 over "data" (when the mesh has it); a batch that doesn't divide is a UserError."""
    from jax.sharding import PartitionSpec

    ways = _ways(mesh, "data")
    if batch % ways:
        raise UserError(
            f"{what} holds {batch} sequences, which do not split over the mesh's {ways} data devices; "
            f"use a multiple of {ways}."
        )
    return PartitionSpec("data" if ways > 1 else None, *([None] * (rank - 1)))


def cache_spec(mesh, shape: tuple[int, ...], *, split_batch: bool = True):
    """A batched cache [batch, kv_heads, positions, head_dim]: batch over "data" (not with
    `split_batch=False`: one sequence's row, replicated over "data"), heads over "model" when
    they divide (else replicated over "model")."""
    from jax.sharding import PartitionSpec

    spec = list(batch_spec(mesh, shape[0], len(shape), "the KV cache")) if split_batch else [None] * len(shape)
    ways = _ways(mesh, "model")
    if ways > 1 and shape[1] % ways == 0:
        spec[1] = "model"
    return PartitionSpec(*spec)
