"""Helpers for users' own test suites (see `tpuedge.testing.plugin` for the pytest plugin)."""

__all__: list[str] = []
