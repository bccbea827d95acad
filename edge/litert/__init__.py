"""The LiteRT lowering: a Program (and its QuantConfig) to a .tflite through litert-torch and ai-edge-quantizer, and the LiteRT interpreter that runs it."""

__all__: list[str] = []
