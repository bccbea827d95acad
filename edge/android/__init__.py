"""The `android` target: its capability, build (float, dynamic-int8, int8, auto), artifact and latency."""

__all__: list[str] = []
