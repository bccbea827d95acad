"""Does the device compute what the PyTorch model computes? Every runtime against one IR.

    result = tpuedge.verify("build/android", program, "eval.npz", labels="label", min_cosine=0.99)
    result.passed, result.outputs, result.accuracy, print(result)
    tpuedge.verify(..., per_layer=True).layers.ranked()[0]   # the layer that broke

`tpuedge.verify` is this package and, called, `verify.compare.verify` (so both
`tpuedge.verify(...)` and `from tpuedge.verify import verify` work). Importing it stays light:
the CLI's start-up path goes through here.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["verify", "VerifyResult", "LayerReport", "write_report_dir", "DEFAULT_MIN_COSINE"]

# The threshold every verify applies unless told otherwise: each output's cosine similarity
# with the float IR (all samples flattened together) must reach it. Here, not in compare.py, so
# the CLI can state it in --help without importing numpy.
DEFAULT_MIN_COSINE = 0.99

_LAZY = {
    "verify": ("tpuedge.verify.compare", "verify"),
    "VerifyResult": ("tpuedge.verify.result", "VerifyResult"),
    "LayerReport": ("tpuedge.verify.per_layer", "LayerReport"),
    "write_report_dir": ("tpuedge.verify.report", "write_report_dir"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tpuedge.verify' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """Lets `tpuedge.verify(...)` call the function while `tpuedge.verify` stays the package."""

    def __call__(self, *args: Any, **kwargs: Any):
        from tpuedge.verify.compare import verify

        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
