"""The `mcu` target: TFLite-Micro's op set as data, the int8 forms it runs, the arena, boards, C source and the interpreter."""

__all__: list[str] = []
