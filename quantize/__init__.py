"""Quantization shared by the backends: frozen configs, calibration data, recipes."""

__all__: list[str] = []
