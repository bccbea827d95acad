"""Checkpoints and preemption of a TrainStep: `step.save(folder)`, `train_step(..., resume=folder)`.

    step = tpuedge.cloud.train_step(model, loss_fn, optimizer, example, mesh="data:8", resume="ckpt")
    for i, batch in enumerate(batches):
        if i < step.data_position: continue        # batches the checkpoint already consumed
        step(*batch)
        if i % 100 == 99: step.save("ckpt")       # async: training goes on while it is written

A checkpoint (tpuedge.cloud.checkpoint) holds the whole train state: parameters, buffers,
optimizer state (with the LR schedule's position), the step counter and the RNG key, so the
steps after a resume are bitwise those of a run that never stopped; and `data_position`, the
number of batches consumed unless `save(data_position=...)` says otherwise (any JSON value).

Preemption: once a step knows its checkpoint folder (it resumed from one or saved to one),
SIGTERM makes the next call save the state before that step and exit with code 0, so at most
the current step is redone. In a job of several processes JAX's preemption service takes the
signal and all processes stop at the same step (`multihost_utils.reached_preemption_sync_point`).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import jax

from tpuedge.cloud.checkpoint import CheckpointFolder

__all__ = ["Checkpointing"]

_sigterm = threading.Event()  # set by the single-process SIGTERM handler


def _on_sigterm(_signum, _frame) -> None:
    _sigterm.set()


class Checkpointing:
    """The save / resume / preemption part of TrainStep (it needs `state` and `_host_steps`)."""

    _checkpoints: CheckpointFolder | None = None
    data_position: Any = 0

    def save(self, directory: str | Path, *, keep: int = 3, data_position: Any = None, wait: bool = False) -> int:
        """Save the train state as checkpoint `step_count` under `directory` (the newest `keep`
        are kept) and return that step. Returns once the state is off the devices; the write
        finishes in the background (`wait=True` or `wait_until_saved()` block until it is done).
        Every process of a job calls it at the same step."""
        folder = self._checkpoint_folder(directory, keep)
        position = self._host_steps if data_position is None else data_position
        record = {"step": self._host_steps, "data_position": position, "processes": jax.process_count()}
        folder.save(self._host_steps, self.state, record)
        if wait:
            folder.wait()
        return self._host_steps

    def wait_until_saved(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.wait()

    def resume(self, directory: str | Path, *, keep: int = 3) -> bool:
        """Load the newest checkpoint in `directory` into this step (False, and nothing changed,
        when it holds none yet). Its state must have this step's shapes; the mesh may differ."""
        folder = self._checkpoint_folder(directory, keep)
        if folder.latest_step() is None:
            return False
        state, record = folder.restore(self.state)
        self.state = state
        self._host_steps = int(record["step"])
        self.data_position = record.get("data_position", self._host_steps)
        return True

    @property
    def checkpoint_folder(self) -> Path | None:
        return None if self._checkpoints is None else self._checkpoints.directory

    def _checkpoint_folder(self, directory: str | Path, keep: int) -> CheckpointFolder:
        path = Path(directory).absolute()
        if self._checkpoints is None or (self._checkpoints.directory, self._checkpoints.keep) != (path, keep):
            if self._checkpoints is not None:
                self._checkpoints.close()
            self._checkpoints = CheckpointFolder(path, keep)
            self._watch_for_preemption()
        return self._checkpoints

    def _watch_for_preemption(self) -> None:
        if jax.process_count() > 1:
            return  # JAX's preemption service already takes SIGTERM in every process of the job
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
            signal.SIG_DFL,
            None,
        ):
            _sigterm.clear()
            signal.signal(signal.SIGTERM, _on_sigterm)

    def _stop_if_preempted(self) -> None:
        """Called before each step: on a preemption notice, save and exit."""
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            hit = multihost_utils.reached_preemption_sync_point(self._host_steps)
        else:
            hit = _sigterm.is_set()
        if not hit:
            return
        _sigterm.clear()  # this notice is handled here
        if self._checkpoints is not None:
            self.save(self._checkpoints.directory, wait=True)
            if jax.process_index() == 0:
                print(
                    f"tpuedge: preempted (SIGTERM); step {self._host_steps} saved to {self._checkpoints.directory}; "
                    "run again with train_step(..., resume=that folder) to go on.",
                    file=sys.stderr,
                    flush=True,
                )
            raise SystemExit(0)
        raise SystemExit(128 + signal.SIGTERM)  # nothing to save to: end as SIGTERM would have
