"""One request from its submission to its last token, read by its HTTP handler as text pieces.

The handler's thread waits on the request's token queue; while it waits it also watches its
client's socket, so a client that leaves (a closed stream, a timed-out call) cancels the request
and frees its row instead of decoding for nobody.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator

from tpuedge.serve.engine_driver import DONE, EngineDriver, ServerClosing
from tpuedge.serve.openai_requests import ApiError, GenerationParams
from tpuedge.serve.text_stream import TextStream
from tpuedge.shared_ir.errors import UserError

__all__ = ["CompletionRun", "ClientGone"]

_FINISH_REASONS = {"eos": "stop", "max_new_tokens": "length"}


class ClientGone(Exception):
    """The client closed its connection; its request is cancelled."""


class CompletionRun:
    def __init__(
        self,
        driver: EngineDriver,
        params: GenerationParams,
        tokenizer,
        *,
        client_gone: Callable[[], bool],
        poll_s: float = 0.05,
    ):
        self.eos_ids = () if params.ignore_eos else tuple(tokenizer.eos_token_ids)
        self.prompt_tokens = len(params.prompt_ids)
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.text = TextStream(tokenizer, params.stop, skip_special_tokens=params.skip_special_tokens)
        self._client_gone = client_gone
        self._poll_s = poll_s
        self.started_s = self._checked_s = time.perf_counter()
        try:
            self.submission = driver.submit(params.prompt_ids, params.max_tokens, params.sampling, self.eos_ids)
        except Exception as exc:  # noqa: BLE001  (mapped to the HTTP status it deserves)
            raise _api_error(exc) from None

    @property
    def request(self):
        return self.submission.request

    def pieces(self) -> Iterator[str]:
        """The text as it becomes final (the EOS token and anything from a stop string on left
        out); `finish_reason` is set once it ends."""
        while True:
            event = self._next()
            if event is DONE:
                break
            if isinstance(event, BaseException):
                raise _api_error(event)
            self.completion_tokens += 1
            if event in self.eos_ids:
                continue  # it ends the text without being part of it (the engine stops on it)
            piece = self.text.push(event)
            if piece:
                yield piece
            if self.text.stopped:
                self.submission.cancel()  # a stop string: the row is freed at the next step
                self.finish_reason = "stop"
                return
        rest = self.text.finish()
        if rest:
            yield rest
        self.finish_reason = _FINISH_REASONS.get(self.request.stopped_by, "stop")

    def cancel(self) -> None:
        self.submission.cancel()

    def _next(self):
        # the client is looked at every poll_s, also while tokens keep coming (a reply not
        # streamed writes nothing until the end, so only this notices a client that gave up)
        while True:
            now = time.perf_counter()
            if now - self._checked_s >= self._poll_s:
                self._checked_s = now
                if self._client_gone():
                    self.submission.cancel()
                    raise ClientGone()
            try:
                return self.submission.events.get(timeout=self._poll_s)
            except queue.Empty:
                continue


def _api_error(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, UserError):
        return ApiError(400, str(exc))
    if isinstance(exc, ServerClosing):
        return ApiError(503, str(exc), "server_error")
    return ApiError(500, f"{type(exc).__name__}: {exc}", "server_error")
