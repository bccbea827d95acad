"""The HTTP routes: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions`.

HTTP/1.1 with keep-alive: a JSON reply carries its Content-Length; a stream (`"stream": true`)
is Server-Sent Events, `data: {...}` chunks ending with `data: [DONE]`, in a chunked body.
Every error is the OpenAI error body with its status (400 for a request the model can't take,
404 for an unknown route); the server keeps serving after any of them.
"""

from __future__ import annotations

import json
import select
import socket
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tpuedge.serve.completion_run import ClientGone, CompletionRun
from tpuedge.serve.openai_requests import ApiError, chat_params, completion_params
from tpuedge.serve.openai_responses import (
    Reply,
    chat_body,
    chat_chunk,
    completion_body,
    completion_chunk,
    error_body,
    model_entry,
    models_body,
    usage,
    usage_chunk,
)

__all__ = ["ApiHandler", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 8 * 2**20
_ROUTES = {
    ("GET", "/v1/models"): "_models",
    ("POST", "/v1/completions"): "_completion",
    ("POST", "/v1/chat/completions"): "_chat",
}
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
_PEEK_NOW = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tpuedge"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        self._started = False  # whether a status line has gone out
        path = urlsplit(self.path).path.rstrip("/") or "/"
        try:
            raw = (
                self._read_body() if method == "POST" else b""
            )  # read whatever the route: the connection stays in step
            route = _ROUTES.get((method, path))
            if route is not None:
                getattr(self, route)(raw)
            elif method == "GET" and path.startswith("/v1/models/"):
                self._model(path.removeprefix("/v1/models/"))
            elif any(path == known for _, known in _ROUTES):
                raise ApiError(405, f"{path} takes {'POST' if method == 'GET' else 'GET'}, not {method}.")
            else:
                raise ApiError(
                    404,
                    f"No route {method} {path}: this server has GET /v1/models, POST /v1/completions "
                    "and POST /v1/chat/completions.",
                )
        except ApiError as exc:
            self._fail(exc)
        except (ClientGone, *_GONE):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001  (our bug: the client gets a 500, the server goes on)
            self.server.log(f"{method} {path}: internal error\n{traceback.format_exc()}")
            self._fail(
                ApiError(
                    500,
                    f"Internal error (a bug in tpuedge, please report it): {type(exc).__name__}: {exc}",
                    "server_error",
                )
            )

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self.close_connection = True
            raise ApiError(411 if length is None else 400, "Send the JSON body with a Content-Length header.")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would be taken for the next request
            raise ApiError(413, f"The body is {int(length):,} bytes; this server reads at most {MAX_BODY_BYTES:,}.")
        return self.rfile.read(int(length))

    @staticmethod
    def _json(raw: bytes):
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"The body is not valid JSON: {exc}.") from None

    # ---- routes --------------------------------------------------------------------------
    def _models(self, _raw: bytes) -> None:
        self._send_json(200, models_body(self.server.model_name, self.server.created))

    def _model(self, name: str) -> None:
        if name != self.server.model_name:
            raise ApiError(
                404, f"No model {name!r} here; this server serves {self.server.model_name!r}.", param="model"
            )
        self._send_json(200, model_entry(self.server.model_name, self.server.created))

    def _completion(self, raw: bytes) -> None:
        self._generate(completion_params(self._json(raw), self.server.artifact), chat=False)

    def _chat(self, raw: bytes) -> None:
        self._generate(chat_params(self._json(raw), self.server.artifact), chat=True)

    def _generate(self, params, *, chat: bool) -> None:
        reply = Reply(
            f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time()), self.server.model_name, chat
        )
        run = CompletionRun(self.server.driver, params, self.server.artifact.tokenizer, client_gone=self._client_gone)
        try:
            if params.stream:
                self._stream(run, reply, params.include_usage)
            else:
                text = "".join(run.pieces())
                used = usage(run.prompt_tokens, run.completion_tokens)
                self._send_json(200, (chat_body if chat else completion_body)(reply, text, run.finish_reason, used))
        finally:
            run.cancel()  # a no-op once it ended; frees its row if this handler leaves early
            self._log_run(run)

    def _stream(self, run: CompletionRun, reply: Reply, include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._started = True
        if reply.chat:
            self._event(chat_chunk(reply, {"role": "assistant", "content": ""}))
        try:
            for piece in run.pieces():
                self._event(chat_chunk(reply, {"content": piece}) if reply.chat else completion_chunk(reply, piece))
        except ApiError as exc:  # the status line is out: the error goes as an event
            self._event(error_body(exc.message, exc.kind, exc.param))
        else:
            self._event(
                chat_chunk(reply, {}, run.finish_reason)
                if reply.chat
                else completion_chunk(reply, "", run.finish_reason)
            )
            if include_usage:
                self._event(usage_chunk(reply, usage(run.prompt_tokens, run.completion_tokens)))
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")  # the chunked body's end

    # ---- writing -------------------------------------------------------------------------
    def _event(self, data: dict) -> None:
        self._chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _send_json(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self._started = True
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def _fail(self, exc: ApiError) -> None:
        if self._started:  # mid-reply: nothing sensible can follow on this connection
            self.close_connection = True
            return
        try:
            self._send_json(exc.status, error_body(exc.message, exc.kind, exc.param))
        except _GONE:
            self.close_connection = True
        self.server.log(f"{self.command} {urlsplit(self.path).path} {exc.status}: {exc.message}")

    def _client_gone(self) -> bool:
        """Whether the client closed its end: a peek that doesn't wait reads end-of-stream.
        Nothing to read means it is still there, and so do bytes waiting (a pipelined request)."""
        try:
            if not hasattr(socket, "MSG_DONTWAIT") and not select.select([self.connection], [], [], 0)[0]:
                return False  # Windows: select says whether the peek would wait
            return self.connection.recv(1, _PEEK_NOW) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    # ---- logging -------------------------------------------------------------------------
    def _log_run(self, run: CompletionRun) -> None:
        why = run.finish_reason or "ended early"
        self.server.log(
            f"{self.command} {urlsplit(self.path).path}: {run.prompt_tokens} prompt + {run.completion_tokens} "
            f"new tokens ({why}) in {time.perf_counter() - run.started_s:.2f} s"
        )

    def log_request(self, code="-", size="-") -> None:
        pass  # one line per generation from _log_run, errors from _fail

    def log_message(self, format: str, *args) -> None:  # noqa: A002  (BaseHTTPRequestHandler's signature)
        self.server.log(f"{self.address_string()} {format % args}")
