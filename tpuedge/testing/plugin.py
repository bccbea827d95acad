"""pytest plugin registered through the `pytest11` entry point (kept import-light)."""
