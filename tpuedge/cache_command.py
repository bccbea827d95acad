"""`tpuedge cache info|clear`: the build cache's folder, size and entries per stage (light: no torch)."""

from __future__ import annotations

import click

__all__ = ["cache_command"]


@click.group("cache")
def cache_command() -> None:
    """The build cache ($TPUEDGE_CACHE_DIR, else ~/.cache/tpuedge; size limit $TPUEDGE_CACHE_SIZE or
    `cache_size` in [tool.tpuedge], default 2G, least recently used entries evicted first)."""


def _store():
    from tpuedge.config import find_config
    from tpuedge.shared_ir.cache import BuildCache

    return BuildCache.default(find_config().get("cache_size"))


@cache_command.command("info")
def info() -> None:
    """Where the cache is, how full, and its entries per build stage."""
    click.echo(_store().info().describe())


@cache_command.command("clear")
def clear() -> None:
    """Delete every cache entry (the next build of each stage runs cold)."""
    store = _store()
    entries, size = store.clear()
    click.echo(f"removed {entries} entr{'y' if entries == 1 else 'ies'} ({size:,} bytes) from {store.directory}")
