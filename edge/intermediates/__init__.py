"""A .tflite's intermediate tensors mapped to IR nodes and read from the LiteRT or TFLite-Micro
interpreter: per-layer verify compares them with the IR's own values, and trained ranges are
placed on the tensors through the same mapping."""

__all__: list[str] = []
