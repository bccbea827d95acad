"""A training job of several processes: JAX's multi-process runtime with one global mesh.

Every process runs the same script. `initialize()` joins the job (jax.distributed); after it,
`jax.devices()` lists every process's devices, so a mesh such as "data:8" spans the whole job,
and each process feeds only its share of the global batch (`global_batch_array`).

Where the job's shape comes from:
- `python -m tpuedge.cloud.launch --processes P script.py` (local development and tests) starts
  P processes and hands each its coordinator, process count and id in the environment; they
  join the job before the script runs.
- On a multi-host TPU slice, `initialize()` with no arguments lets JAX read the slice from the
  TPU VM (one process per host).
- Anywhere else, pass `coordinator_address`, `num_processes` and `process_id` explicitly.

Host CPU devices talk across processes through gloo (`jax_cpu_collectives_implementation`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = [
    "ENV_COORDINATOR",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "initialize",
    "join_launched_job",
    "process_count",
    "process_index",
    "is_main_process",
    "global_example",
    "global_batch_array",
    "host_copy",
    "check_mesh_spans_job",
    "put_state",
]

ENV_COORDINATOR = "TPUEDGE_COORDINATOR"
ENV_NUM_PROCESSES = "TPUEDGE_NUM_PROCESSES"
ENV_PROCESS_ID = "TPUEDGE_PROCESS_ID"


def _launched() -> tuple[str, int, int] | None:
    """(coordinator, count, id) that `tpuedge.cloud.launch` put in this process's environment."""
    if ENV_COORDINATOR not in os.environ:
        return None
    try:
        return os.environ[ENV_COORDINATOR], int(os.environ[ENV_NUM_PROCESSES]), int(os.environ[ENV_PROCESS_ID])
    except (KeyError, ValueError):
        raise UserError(
            f"{ENV_COORDINATOR} is set but {ENV_NUM_PROCESSES} / {ENV_PROCESS_ID} are missing or not integers; "
            "start the job with `python -m tpuedge.cloud.launch --processes P script.py`, or unset them."
        ) from None


def initialize(
    coordinator_address: str | None = None, num_processes: int | None = None, process_id: int | None = None
) -> None:
    """Join the job (once; later calls do nothing). Must run before anything uses a JAX device."""
    if jax.distributed.is_initialized():
        return
    launched = _launched()
    if coordinator_address is None and launched is not None:
        coordinator_address, num_processes, process_id = launched
    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices of other processes
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    except (RuntimeError, ValueError) as error:
        raise UserError(
            f"Could not join the multi-process job ({str(error).splitlines()[0]}). Call "
            "tpuedge.cloud.distributed.initialize() at the top of the script, before anything touches a JAX "
            "device; on CPU give coordinator_address='127.0.0.1:PORT', num_processes and process_id, or start "
            "the script with `python -m tpuedge.cloud.launch --processes P script.py`."
        ) from None


def join_launched_job() -> None:
    """Join the job when `tpuedge.cloud.launch` started this process (train_step calls it)."""
    if _launched() is not None:
        initialize()


def process_count() -> int:
    return jax.process_count()


def process_index() -> int:
    return jax.process_index()


def is_main_process() -> bool:
    """True in process 0, the one that logs and reports metrics."""
    return jax.process_index() == 0


def global_example(flat: Sequence[Any]) -> list[Any]:
    """The global batch's shapes from one process's share: every process passes its own share
    (the same shape in each), and the step is captured for P of them stacked on dim 0."""
    count = jax.process_count()
    if count == 1:
        return list(flat)
    import zlib

    import torch
    from jax.experimental import multihost_utils

    shapes = [list(getattr(t, "shape", ())) for t in flat]
    digest = np.array([zlib.crc32(repr(shapes).encode()) & 0x7FFFFFFF], np.int32)
    try:
        multihost_utils.assert_equal(digest, "example shares differ")
    except AssertionError:
        raise UserError(
            f"The processes of this job were given example batches of different shapes (process "
            f"{jax.process_index()}: {shapes}); every process passes its share of the global batch, the same "
            "shape in each (the global batch split evenly by the process count)."
        ) from None
    return [torch.cat([t] * count) if isinstance(t, torch.Tensor) and t.dim() else t for t in flat]


def global_batch_array(local: Any, global_shape: tuple[int, ...], sharding: Any, name: str) -> jax.Array:
    """This process's share of one batch tensor, as a slice of the global array."""
    count = jax.process_count()
    local = np.asarray(jax.device_get(local) if isinstance(local, jax.Array) else local)
    share = (global_shape[0] // count,) + tuple(global_shape[1:]) if global_shape else ()
    if tuple(local.shape) != share:
        raise UserError(
            f"Process {jax.process_index()} fed {name!r} with shape {list(local.shape)}, but in a job of {count} "
            f"processes each one feeds its share of the global batch {list(global_shape)}: shape {list(share)}. "
            "Give every process a share of the same shape (drop a last partial batch), as in the example batch."
        )
    return jax.make_array_from_process_local_data(sharding, local, global_shape)


def host_copy(tree: Any) -> Any:
    """A numpy copy of every leaf, gathered from all processes where a leaf is sharded across them."""
    from jax.experimental import multihost_utils

    def fetch(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return np.asarray(jax.device_get(leaf))

    return jax.tree.map(fetch, tree)


def check_mesh_spans_job(mesh: Any) -> None:
    """In a job of several processes the step's mesh must hold devices of every process."""
    count = jax.process_count()
    if count == 1:
        return
    if mesh is None:
        raise UserError(
            f"This is a job of {count} processes, so the train step needs a mesh over all of its "
            f"{jax.device_count()} devices; pass mesh='data:{jax.device_count()}' (or 'fsdp:{jax.device_count()}')."
        )
    covered = {d.process_index for d in mesh.devices.flat}
    if covered != set(range(count)):
        raise UserError(
            f"The mesh holds {mesh.devices.size} of the job's {jax.device_count()} devices, none of process(es) "
            f"{sorted(set(range(count)) - covered)}; size it to span every process, e.g. mesh='data:{jax.device_count()}'."
        )


def put_state(state: Any, shardings: Any) -> Any:
    """Place a train state (the same values in every process) on its shardings; None: as is."""
    if shardings is None:
        return state
    if jax.process_count() == 1:
        return jax.device_put(state, shardings)
    host = jax.tree.map(lambda leaf: np.asarray(jax.device_get(leaf)), state)
    return jax.tree.map(lambda h, s: jax.make_array_from_callback(h.shape, s, h.__getitem__), host, shardings)
