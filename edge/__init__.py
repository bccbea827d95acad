"""Edge backend: the shared IR lowered to LiteRT flatbuffers for `android` and `mcu`."""

__all__: list[str] = []
