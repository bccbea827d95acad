"""One thread steps the continuous-batching engine; HTTP handlers only enqueue and read.

The engine (shared_ir/generative/batch_engine.py) is single-threaded. `EngineDriver.submit` queues a
request and returns a `Submission` whose `events` queue receives each new token id, then `DONE`
(or the exception that ended it). Between decode steps the thread admits waiting requests into
free rows, so a request joins a running batch at the next step and leaves it on its own.
A handler cancels with `Submission.cancel()`: the row is freed at the next step.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tpuedge.shared_ir.generative.batch_engine import BatchEngine, Request
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.generation import Sampling

__all__ = ["EngineDriver", "Submission", "DONE", "ServerClosing"]

_CLOSE_WAIT_S = 10.0

DONE = object()


class ServerClosing(Exception):
    """The server shut down before the request finished."""


@dataclass(eq=False)
class Submission:
    request: Request
    events: queue.Queue = field(default_factory=queue.Queue)

    def cancel(self) -> None:
        self.request.cancel()


class EngineDriver:
    def __init__(self, make_engine: Callable[[], BatchEngine], *, log: Callable[[str], None] | None = None):
        self._make_engine = make_engine
        self.engine = make_engine()
        self._log = log
        self._pending: deque[Submission] = deque()
        self._running: dict[int, Submission] = {}  # request id -> submission, for the rows taken
        self._wake = threading.Condition()
        self._closing = False
        self._broken: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.finished: deque[Request] = deque(maxlen=256)  # the latest requests to end, newest last
        self.peak_active = 0  # the most rows decoding together so far

    @property
    def slots(self) -> int:
        return self.engine.slots

    @property
    def active_count(self) -> int:
        return len(self._running)

    def warm_up(self, prompt_lengths: list[int]) -> None:
        """Compile every step now (a prompt per length, one new token), not on a user's request.
        Runs on the caller's thread, before `start`. Twice: a step first sees the fresh cache,
        later ones a cache a step returned, and JAX compiles a step for each (measured on XLA:CPU:
        the first request after a single warm-up spent 1.5 s compiling)."""
        for _ in range(2):
            for length in prompt_lengths:
                self.engine.run([Request([0] * length, 1)])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tpuedge-engine", daemon=True)
        self._thread.start()

    def submit(
        self, prompt_ids: list[int], max_new_tokens: int, sampling: Sampling, stop_ids: tuple[int, ...]
    ) -> Submission:
        events: queue.Queue = queue.Queue()
        request = Request(
            list(prompt_ids),
            int(max_new_tokens),
            sampling,
            tuple(stop_ids),
            on_token=lambda _request, token: events.put(token),
        )
        submission = Submission(request, events)
        self.engine.check(request)
        with self._wake:
            if self._closing:
                raise ServerClosing("the server is shutting down")
            if self._broken is not None:
                raise ServerClosing(
                    f"the engine stopped ({type(self._broken).__name__}: {self._broken}); restart the server"
                )
            self._pending.append(submission)
            self._wake.notify()
        return submission

    def close(self) -> None:
        """Stop the thread; every waiting or running request ends with ServerClosing."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:  # a step stuck in a runtime must not hold the shutdown: the thread is a daemon
            self._thread.join(timeout=_CLOSE_WAIT_S)
        with self._wake:
            left = [*self._pending, *self._running.values()]
            self._pending.clear()
            self._running.clear()
        for submission in left:
            submission.cancel()
            submission.events.put(ServerClosing("the server shut down before the request finished"))

    def _loop(self) -> None:
        try:
            while True:
                with self._wake:
                    while not self._closing and not self._pending and not self._running:
                        self._wake.wait()
                    if self._closing:
                        return
                self._admit()
                if self._running:
                    self._step()
        except BaseException as exc:  # not even a fresh engine could be made: nothing more can be served
            with self._wake:
                self._broken = exc
                left = [*self._pending, *self._running.values()]
                self._pending.clear()
                self._running.clear()
            for submission in left:
                submission.events.put(exc)
            if self._log:
                self._log(f"the engine thread stopped ({type(exc).__name__}: {exc}); restart the server")
            raise

    def _admit(self) -> None:
        while True:
            with self._wake:
                if not self._pending:
                    return
                submission = self._pending[0]
            request = submission.request
            if request.cancelled:  # its client left while it waited for a row
                request.stopped_by = "cancelled"
                self._pop_pending(submission)
                self._end(submission)
                continue
            try:
                taken = self.engine.add(request)
            except UserError as exc:  # refused before its prefill: the engine is untouched
                self._pop_pending(submission)
                submission.events.put(exc)
                continue
            except Exception as exc:  # noqa: BLE001  (a failed prefill may have taken the donated cache with it)
                self._pop_pending(submission)
                self._reset(exc, [submission])
                continue
            if not taken:
                return  # every row is busy: it waits for the next free one
            self._pop_pending(submission)
            self._running[request.id] = submission
            self.peak_active = max(self.peak_active, len(self._running))
            if request.done:
                self._end(submission)

    def _pop_pending(self, submission: Submission) -> None:
        with self._wake:
            self._pending.remove(submission)

    def _step(self) -> None:
        try:
            self.engine.step()
        except Exception as exc:  # noqa: BLE001  (reported to the requests it ends; a fresh engine takes over)
            self._reset(exc, [])
            return
        # A finished row is any that is done now: step() returns those that ended by a token,
        # and cancelled rows are freed without being returned.
        for submission in [s for s in self._running.values() if s.request.done]:
            self._end(submission)

    def _reset(self, exc: Exception, also: list[Submission]) -> None:
        """The engine failed (our bug, or the runtime's): every running request ends with the
        error, and a fresh engine (an empty cache) serves the next ones."""
        failed = [*self._running.values(), *also]
        self._running.clear()
        for submission in failed:
            submission.events.put(exc)
        if self._log:
            self._log(
                f"the engine failed ({type(exc).__name__}: {exc}); {len(failed)} request(s) ended, its cache reset"
            )
        self.engine = self._make_engine()

    def _end(self, submission: Submission) -> None:
        self._running.pop(submission.request.id, None)
        self.finished.append(submission.request)
        submission.events.put(DONE)
