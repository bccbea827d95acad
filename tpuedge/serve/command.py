"""`tpuedge serve DIR`: a built language model behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["serve_command"]


@click.command("serve")
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0 takes a free port.")
@click.option(
    "--slots",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Sequences decoded together (cloud-tpu builds; others serve one request at a time).",
)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="Runtime threads (LiteRT).")
def serve_command(artifact: Path, host: str, port: int, slots: int, threads: int) -> None:
    """Serve a language model built by `tpuedge build` at /v1/completions and /v1/chat/completions
    (OpenAI-compatible, streaming too). Ctrl-C stops it."""
    from tpuedge.command_inputs import console
    from tpuedge.serve.server import open_server

    out = console()
    out.print(f"[dim]opening {artifact} and compiling its steps...[/dim]")
    server = open_server(artifact, host=host, port=port, slots=slots, threads=threads)
    built = server.artifact
    rows = f"{server.driver.slots} sequences decoded together" if server.driver.slots > 1 else "one request at a time"
    out.print(
        f"serving {server.model_name} ({built.runtime_name}, {rows}, context {built.decoder_spec.cache_length} tokens) "
        f"at {server.url}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    out.print("[dim]routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions; Ctrl-C stops[/dim]")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    out.print("stopped")
