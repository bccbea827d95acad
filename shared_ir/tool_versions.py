"""The installed versions of the tools a build used, as manifests and cache keys record them."""

from __future__ import annotations

from importlib import metadata

__all__ = ["tool_versions"]


def tool_versions(*distributions: str) -> dict[str, str]:
    """{"tpuedge": ..., "torch": ..., each of `distributions`: its version or "not installed"}."""
    versions = {}
    for dist in ("tpuedge", "torch", *distributions):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions
