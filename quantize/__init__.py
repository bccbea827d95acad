"""Quantization shared by the backends: frozen configs, calibration data, recipes, accuracy.

Light at import: `QuantConfig` is a plain dataclass; calibration/metrics import numpy only.
"""

from tpuedge.quantize.config import DEFAULT_SCHEME, IO_DTYPES, SCHEMES, QuantConfig

__all__ = ["QuantConfig", "SCHEMES", "IO_DTYPES", "DEFAULT_SCHEME"]
