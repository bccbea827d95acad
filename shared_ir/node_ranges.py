"""Activation ranges keyed by IR node: the one int8 range decision a Program carries.

Quantization-aware training (cloud/qat.py) learns them and the edge builds give the matching
flatbuffer tensors these ranges instead of calibrating them (edge/litert/trained_ranges.py).
Which nodes are quantization points, and how a range becomes int8, is quantize's
(quantize/activation_ranges.py); the Program only holds and saves the ranges.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

__all__ = ["ActivationRanges"]


@dataclass(frozen=True)
class ActivationRanges:
    """Trained (or measured) [min, max] per quantization point of one Program. A node that is not
    a point keeps the grid of the point `quant_points(program).inherits` names for it."""

    ranges: dict[str, tuple[float, float]]  # point -> (min, max)
    source: str = "quantization-aware training (EMA of batch min/max)"

    def to_json(self) -> dict:
        return {"source": self.source, "ranges": {k: [float(lo), float(hi)] for k, (lo, hi) in self.ranges.items()}}

    @classmethod
    def from_json(cls, data: dict) -> "ActivationRanges":
        return cls(
            {k: (float(lo), float(hi)) for k, (lo, hi) in data["ranges"].items()}, data.get("source", cls.source)
        )

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()
