"""Device meshes and the shardings of a train step: data parallel and FSDP.

Mesh specs: None (one device), "data:8" (8 devices, batch split, everything else replicated),
"fsdp:8" (batch split AND each parameter / optimizer moment sharded along one dim divisible by
8), "data:2,fsdp:4" (both), or a `jax.sharding.Mesh` whose axis names are "data" and/or "fsdp"
(e.g. built over `jax.experimental.topologies` devices to compile for a TPU with no TPU here).
The batch (dim 0 of every input) is split over all of the mesh's axes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tpuedge.shared_ir.errors import UserError

__all__ = [
    "MESH_AXES",
    "mesh_from_spec",
    "parse_mesh",
    "batch_sharding",
    "param_sharding",
    "replicated",
    "tree_shardings",
    "state_shardings",
]

MESH_AXES = ("data", "fsdp")


def parse_mesh(spec: Any, devices: Any = None) -> Mesh | None:
    """None | "data:8" | "fsdp:8" | "data:2,fsdp:4" | Mesh -> Mesh (or None for one device)."""
    if spec is None or isinstance(spec, Mesh):
        if isinstance(spec, Mesh):
            bad = [a for a in spec.axis_names if a not in MESH_AXES]
            if bad:
                raise UserError(
                    f"Mesh axes {bad} are not understood; name the axes 'data' (batch split) and/or "
                    "'fsdp' (batch split + parameters sharded), e.g. Mesh(devices, ('data',))."
                )
        return spec
    return mesh_from_spec(spec, devices, MESH_AXES, ("data:8", "fsdp:8", "data:2,fsdp:4"))


def mesh_from_spec(spec: Any, devices: Any, axes: tuple[str, ...], examples: tuple[str, ...]) -> Mesh:
    """A Mesh from "axis:size[,axis:size]" (each of `axes` at most once) over the first devices;
    the training and the serving meshes differ only in their axes."""
    quoted = [repr(e) for e in examples]
    if not isinstance(spec, str):
        raise UserError(f"mesh must be None, a string like {quoted[0]} or a jax Mesh; got {type(spec).__name__}.")
    names, sizes = [], []
    for part in spec.replace(" ", "").split(","):
        name, _, size = part.partition(":")
        if name not in axes or name in names or not size.isdigit() or int(size) < 1:
            raise UserError(
                f"Mesh spec {spec!r} is not understood; write axis:size pairs with the axes "
                f"{' and/or '.join(repr(a) for a in axes)}, each once, e.g. {', '.join(quoted[:-1])} or {quoted[-1]}."
            )
        names.append(name)
        sizes.append(int(size))
    devices = list(jax.devices() if devices is None else devices)
    need = int(np.prod(sizes))
    if need > len(devices):
        raise UserError(
            f"Mesh {spec!r} needs {need} devices but JAX sees {len(devices)} ({devices[0].platform}). Use a smaller "
            "mesh, or on CPU start Python with XLA_FLAGS=--xla_force_host_platform_device_count=8."
        )
    return Mesh(np.array(devices[:need]).reshape(sizes), tuple(names))


def _batch_axes(mesh: Mesh) -> tuple[str, ...]:
    return tuple(a for a in mesh.axis_names if a in MESH_AXES)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh, shape: tuple[int, ...], name: str = "input") -> NamedSharding:
    """Dim 0 split over every mesh axis; a batch that doesn't divide is a UserError."""
    axes = _batch_axes(mesh)
    ways = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
    if not shape:
        return replicated(mesh)
    if shape[0] % ways:
        raise UserError(
            f"{name} has batch size {shape[0]}, which does not split over the mesh's {ways} devices; "
            f"use a batch size that is a multiple of {ways}."
        )
    return NamedSharding(mesh, PartitionSpec(axes if len(axes) > 1 else axes[0]))


def param_sharding(mesh: Mesh, shape: tuple[int, ...]) -> NamedSharding:
    """FSDP: shard the largest dim divisible by the fsdp axis size (replicate if none is)."""
    if "fsdp" not in mesh.axis_names or mesh.shape["fsdp"] == 1 or not shape:
        return replicated(mesh)
    ways = mesh.shape["fsdp"]
    candidates = [d for d in range(len(shape)) if shape[d] % ways == 0 and shape[d] >= ways]
    if not candidates:
        return replicated(mesh)
    dim = max(candidates, key=lambda d: (shape[d], -d))
    spec = [None] * len(shape)
    spec[dim] = "fsdp"
    return NamedSharding(mesh, PartitionSpec(*spec))


def tree_shardings(mesh: Mesh, tree: Mapping[str, Any]) -> dict[str, NamedSharding]:
    return {name: param_sharding(mesh, tuple(leaf.shape)) for name, leaf in tree.items()}


def state_shardings(mesh: Mesh, state: Any, params: Mapping[str, Any]) -> Any:
    """Shardings for a whole train state pytree: parameters and every optimizer leaf that
    mirrors one (found by its dict key and shape) follow `param_sharding`; the rest replicate."""
    shapes = {name: tuple(p.shape) for name, p in params.items()}

    def choose(path, leaf):
        shape = tuple(getattr(leaf, "shape", ()))
        for entry in reversed(path):
            key = getattr(entry, "key", None)
            if isinstance(key, str) and shapes.get(key) == shape:
                return param_sharding(mesh, shape)
        return replicated(mesh)

    return jax.tree_util.tree_map_with_path(choose, state)
