"""`open_server(DIR)`: a built language model behind the OpenAI-compatible routes.

    server = open_server("build/smollm2/cloud-tpu", port=8000)   # warmed up: the steps compiled
    server.serve_forever()                                       # or in a thread; server.close()

A cloud-tpu build decodes up to `slots` sequences together (continuous batching on XLA); any
other language-model build (android on LiteRT) decodes one request at a time, the others
waiting in line.
"""

from __future__ import annotations

import socket
import socketserver
import sys
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

from tpuedge.serve.engine_driver import EngineDriver
from tpuedge.serve.http_app import ApiHandler
from tpuedge.shared_ir.errors import UserError

__all__ = ["ApiServer", "open_server"]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True  # a stream still open at shutdown doesn't hold the process

    def __init__(self, address: tuple[str, int], artifact, log: Callable[[str], None]):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.artifact = artifact
        self.model_name = artifact.manifest["model_name"]
        self.created = int(time.time())
        self.log = log
        self.driver: EngineDriver | None = None
        self._serving = False
        super().__init__(address, ApiHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/v1"

    def server_bind(self) -> None:
        # HTTPServer's own bind looks the host's name up (a reverse DNS query); nothing here uses it
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._serving = True
        try:
            super().serve_forever(poll_interval)
        finally:
            self._serving = False

    def close(self) -> None:
        """Stop serving (from another thread, or after serve_forever ended), end every request."""
        if self._serving:
            self.shutdown()
        self.server_close()
        if self.driver is not None:
            self.driver.close()


def open_server(
    artifact,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    slots: int = 8,
    threads: int = 1,
    log: Callable[[str], None] = _stderr,
) -> ApiServer:
    """A server for `artifact` (a build folder or a loaded language-model artifact), bound and
    warmed up; call `serve_forever()`. Port 0 takes a free port (see `.url`)."""
    from tpuedge.shared_ir.artifact import load
    from tpuedge.shared_ir.generative.generating_artifact import GeneratingArtifact

    if isinstance(artifact, str | Path):
        artifact = load(artifact)
    if not isinstance(artifact, GeneratingArtifact):
        raise UserError(
            f"{getattr(artifact, 'directory', artifact)} is not a language model build (it has no prefill and "
            "decode entry points); `tpuedge serve` serves models built from a decoder LM."
        )
    if artifact.tokenizer is None:
        raise UserError(
            f"{artifact.directory} was built without a tokenizer; the OpenAI API speaks text, so `tpuedge serve` "
            "needs one (capture the model with its tokenizer.json)."
        )
    try:
        server = ApiServer((host, port), artifact, log)
    except OSError as exc:
        raise UserError(
            f"Can't listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
            "(0 takes a free one) or --host."
        ) from None
    try:
        driver = EngineDriver(lambda: _engine(artifact, slots, threads), log=log)
        spec = artifact.decoder_spec
        # a prompt per prefill entry (its length, and the last token for the first decode step)
        driver.warm_up([n + 1 for n in spec.prefill_lengths if n + 2 <= spec.cache_length] or [1])
        artifact.tokenizer.decode(artifact.tokenizer.encode("warm"))
        driver.start()
    except BaseException:
        server.server_close()
        raise
    server.driver = driver
    return server


def _engine(artifact, slots: int, threads: int):
    from tpuedge.shared_ir.generative.batch_engine import BatchEngine
    from tpuedge.cloud.generative.decoder_artifact import CloudDecoderArtifact

    if isinstance(artifact, CloudDecoderArtifact):
        return BatchEngine(artifact.steps, slots)
    from tpuedge.serve.single_row_steps import SingleRowSteps

    return BatchEngine(SingleRowSteps(artifact.step_runner(threads), artifact.decoder_spec), 1)
