"""Train-state checkpoints on disk with Orbax: sharded, async, atomic, the newest `keep` kept.

A checkpoint folder holds one sub-folder per saved step (Orbax's CheckpointManager layout):
the whole train state (parameters, buffers, optimizer state with its schedule count, step
counter, RNG key) as a sharded PyTree, and a small JSON record: what the state looks like (to
refuse another model's or optimizer's checkpoint) and where the data stood.

Each process writes the shards it holds; the write runs in the background after the arrays
are copied off the devices (in one process, that copy too: the loop only waits for a device-side
copy to be queued, which the next step's donation cannot touch), and a step's folder appears
under its final name only when all of it is written, so a crash mid-save leaves the previous checkpoint as the newest. Restoring
reads onto the shardings of the step that restores, so a checkpoint saved over 8 devices
restores onto 4 (or onto 2 processes from 1).
"""

from __future__ import annotations

import atexit
import concurrent.futures
from pathlib import Path
from typing import Any

import jax
import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = ["CheckpointFolder", "state_signature", "different_model_error"]


def state_signature(state: dict[str, Any]) -> dict[str, Any]:
    """What a train state looks like, without its values: names, shapes and dtypes of the
    parameters and buffers, and the optimizer state's structure and leaf shapes."""

    def described(tree):
        return {name: [list(np.shape(v)), str(np.dtype(v.dtype))] for name, v in sorted(tree.items())}

    leaves, treedef = jax.tree_util.tree_flatten(state["opt_state"])
    return {
        "params": described(state["params"]),
        "buffers": described(state["buffers"]),
        "opt_state": {"structure": str(treedef), "shapes": [list(np.shape(v)) for v in leaves]},
    }


def different_model_error(where: str, detail: str) -> UserError:
    return UserError(
        f"The checkpoint {where} was saved from a different model or optimizer ({detail}); resume it with a "
        "step built from the same model, loss and optimizer, or start this one from a new checkpoint folder."
    )


def _difference(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    for part in ("params", "buffers"):
        a, b = saved.get(part, {}), current[part]
        if set(a) != set(b):
            extra, missing = sorted(set(a) - set(b))[:3], sorted(set(b) - set(a))[:3]
            return f"{part}: saved has {extra or 'nothing'} this step lacks, lacks {missing or 'nothing'}"
        for name in a:
            if list(a[name]) != list(b[name]):
                return f"{name} is {a[name][0]} {a[name][1]} there, {b[name][0]} {b[name][1]} here"
    if saved.get("opt_state") != current["opt_state"]:
        return "the optimizer state has another structure"
    return None


class CheckpointFolder:
    """One checkpoint folder: `save(step, state, record)` in the background, `restore(like)`."""

    def __init__(self, directory: str | Path, keep: int = 3):
        import orbax.checkpoint as ocp

        if keep < 1:
            raise UserError(f"keep={keep}: keep at least 1 checkpoint.")
        self.directory = Path(directory).absolute()
        self.keep = keep
        self._closed = False
        if self.directory.exists() and not self.directory.is_dir():
            raise UserError(f"Checkpoint folder {self.directory} is a file; give a folder path.")
        self._ocp = ocp
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True, create=True)
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        self._saver = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tpuedge-checkpoint")
        self._in_flight: concurrent.futures.Future | None = None
        _finish_at_exit(self)

    def latest_step(self) -> int | None:
        self._settle()
        return self._manager.latest_step()

    def _settle(self) -> None:
        """Wait for the background hand-over to Orbax (not for the write): the manager is used from
        one thread at a time, and a failed save is raised here, at the next call."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()

    def save(self, step: int, state: dict[str, Any], record: dict[str, Any]) -> bool:
        """Start saving `state` as `step` (returns once it is off the devices); False if that
        step is already saved."""
        self._settle()  # a save handed over is in all_steps() (Orbax lists a step when its save starts)
        if step in self._manager.all_steps():
            return False
        args = self._ocp.args
        record = dict(record, signature=state_signature(state))
        if jax.process_count() > 1:
            # Orbax's blocking part syncs the processes with a device collective
            # (sync_global_devices): it must be issued on the thread that runs the training
            # step's collectives, in the same order in every process.
            return self._manager.save(
                step, args=args.Composite(state=args.StandardSave(state), record=args.JsonSave(record)), force=True
            )
        # A copy on the devices, queued ahead of the next step (which donates `state`'s buffers):
        # Orbax copies it off the devices on the saver thread while the loop goes on.
        snapshot = jax.tree.map(
            lambda a: jax.device_put(a, a.sharding, may_alias=False) if isinstance(a, jax.Array) else a, state
        )
        self._in_flight = self._saver.submit(
            self._manager.save,
            step,
            args=args.Composite(state=args.StandardSave(snapshot), record=args.JsonSave(record)),
            force=True,
        )
        return True

    def wait(self) -> None:
        """Block until the save in flight is written."""
        self._settle()
        self._manager.wait_until_finished()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._settle()
            self._saver.shutdown()
            self._manager.wait_until_finished()
            self._manager.close()

    def restore(self, like: dict[str, Any], step: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(state, record) of `step` (default: the newest), read onto `like`'s shapes, dtypes and
        shardings; another model's checkpoint or a damaged one is a UserError."""
        self._settle()
        step = self.latest_step() if step is None else step
        where = f"{self.directory} (step {step})"
        if step is None:
            raise UserError(f"No finished checkpoint in {self.directory}; save one with step.save(folder) first.")
        args = self._ocp.args
        try:
            record = self._manager.restore(step, args=args.Composite(record=args.JsonRestore()))["record"]
        except Exception as error:  # noqa: BLE001 - any failure to read it means the folder is damaged
            raise _damaged(where, error) from None
        if not isinstance(record, dict) or "signature" not in record:
            raise _damaged(where, ValueError("its JSON record has no signature"))
        detail = _difference(record["signature"], state_signature(like))
        if detail:
            raise different_model_error(where, detail)
        target = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), like)
        try:
            state = self._manager.restore(step, args=args.Composite(state=args.StandardRestore(target)))["state"]
        except Exception as error:  # noqa: BLE001
            raise _damaged(where, error) from None
        return state, record


def _finish_at_exit(folder: CheckpointFolder) -> None:
    """Let a save still writing when the script ends finish. The writes run on Python thread
    pools, which refuse work once interpreter shutdown starts, before plain `atexit` callbacks
    run; `threading._register_atexit` (CPython 3.9+) runs ahead of that, `atexit` is the fallback."""
    import threading

    register = getattr(threading, "_register_atexit", None) or atexit.register
    register(folder.close)


def _damaged(where: str, error: Exception) -> UserError:
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    return UserError(
        f"The checkpoint {where} cannot be read: it is damaged or incomplete ({type(error).__name__}: {reason}). "
        "Delete that step's folder to resume from the one before it, or start from a new checkpoint folder."
    )
