"""The .tflite flatbuffer file: the one reader and writer, inspection, and tensor names."""

__all__: list[str] = []
