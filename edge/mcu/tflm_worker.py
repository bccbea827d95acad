"""TFLite-Micro in one long-lived child process: where the mcu search runs its candidates.

Some TFLite-Micro kernels abort the process instead of refusing a model: a softmax whose input
scale is below 2^-26 (`QuantizeMultiplierGreaterThanOne`, HF's tiny random-init MobileViT) took
the whole build down with SIGABRT and no message once the search scored its candidates in
TFLite-Micro in-process. Here one worker serves a build's candidates (one interpreter start,
not one per candidate: a search measures up to a hundred), a crash is that candidate's refusal
(`TflmError`, with the tail of what the child printed), and the next candidate gets a fresh
worker. The child answers on a private copy of its stdout; whatever TFLite-Micro or a library
prints goes to its stderr, a file the parent reads only after a crash. A worker whose parent
is gone reads end-of-file and exits.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import threading
from collections.abc import Sequence

import numpy as np

__all__ = ["TflmWorker", "worker_outputs", "worker_allocated_bytes", "close_worker", "serve"]

_LENGTH = struct.Struct("<Q")
_STDERR_TAIL = 4000
_ALLOCATION = "allocation"  # a request's third part: allocate only, answer the allocator's figure


def _send(stream, obj) -> None:
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(blob)))
    stream.write(blob)
    stream.flush()


def _receive(stream):
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("the other side closed the channel")
    size = _LENGTH.unpack(head)[0]
    blob = stream.read(size)
    if len(blob) < size:
        raise EOFError("the other side closed the channel mid-message")
    return pickle.loads(blob)


class TflmWorker:
    """A child process that runs models in TFLite-Micro."""

    def __init__(self):
        self._child = None
        self._lock = threading.Lock()

    def outputs(
        self, model: bytes, arena: int, samples: Sequence[Sequence[np.ndarray]] | None
    ) -> list[list[np.ndarray]]:
        """Each sample's outputs (float in, float out); samples=None: one run on raw zeros, no outputs."""
        return self._ask(model, arena, None if samples is None else [list(s) for s in samples])

    def allocated_bytes(self, model: bytes, arena: int) -> int | None:
        """What TFLite-Micro's allocator took of `arena` bytes for `model`, allocated and not run
        (`TflmRunner.allocated_bytes`); None where the interpreter does not say."""
        return self._ask(model, arena, _ALLOCATION)

    def _ask(self, model: bytes, arena: int, what):
        from tpuedge.edge.mcu.child_process import spawn
        from tpuedge.edge.mcu.tflm_runtime import TflmError

        with self._lock:
            if self._child is None:
                self._child = spawn("tpuedge.edge.mcu.tflm_worker.serve")
            proc = self._child.proc
            try:
                _send(proc.stdin, (model, arena, what))
                status, payload = _receive(proc.stdout)
            except (BrokenPipeError, EOFError, OSError):
                code = proc.wait()
                log = self._child.stderr_text(_STDERR_TAIL)
                self._child.discard()
                self._child = None
                raise TflmError(f"TFLite-Micro crashed running it (exit {code})", log) from None
        if status != "ok":
            raise TflmError("TFLite-Micro refused it", payload)
        return payload

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._child.discard()  # the worker reads end-of-file and exits
                self._child = None


_WORKER: TflmWorker | None = None
_WORKER_LOCK = threading.Lock()


def _worker() -> TflmWorker:
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = TflmWorker()
        return _WORKER


def worker_outputs(model: bytes, arena: int, samples) -> list[list[np.ndarray]]:
    """`samples` run on `model` in this process's TFLite-Micro worker (started on first use);
    samples=None runs it once on zeros (does each kernel take the model?)."""
    return _worker().outputs(model, arena, samples)


def worker_allocated_bytes(model: bytes, arena: int) -> int | None:
    """`model` allocated in `arena` bytes in this process's TFLite-Micro worker, not run: what
    the allocator took (`TflmWorker.allocated_bytes`)."""
    return _worker().allocated_bytes(model, arena)


def close_worker() -> None:
    """End this process's worker, if one runs (the next `worker_outputs` starts another)."""
    global _WORKER
    with _WORKER_LOCK:
        worker, _WORKER = _WORKER, None
    if worker is not None:
        worker.close()


def serve() -> None:
    """The worker: read (model, arena, samples or None or _ALLOCATION), answer ("ok", outputs or
    the allocator's figure) or ("refused", log)."""
    from tpuedge.edge.mcu.tflm_runtime import TflmError, TflmRunner

    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a library's print goes to stderr, never into a reply
    requests = sys.stdin.buffer
    while True:
        try:
            model, arena, samples = _receive(requests)
        except EOFError:
            return
        try:
            runner = TflmRunner(model, arena)
            if samples == _ALLOCATION:  # what allocating took, no run
                reply = ("ok", runner.allocated_bytes())
            elif samples is None:  # a kernel check: one run on raw zeros
                runner.run_raw([np.zeros(d["shape"], d["dtype"]) for d in runner.input_details])
                reply = ("ok", [])
            else:
                reply = ("ok", [runner.run(sample) for sample in samples])
        except TflmError as exc:
            reply = ("refused", exc.log or str(exc))
        _send(replies, reply)
