"""Tensor specs (name, shape, dtype) and input validation shared by the IR and every runtime."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = ["TensorSpec", "to_numpy", "validate_inputs"]


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor of the IR's interface. Symbolic dims are kept as strings ("s0")."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str  # numpy dtype name: "float32", "int64", ...

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict) -> "TensorSpec":
        return cls(d["name"], tuple(d["shape"]), d["dtype"])

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(str(s) for s in self.shape)}]"


def to_numpy(value: Any) -> np.ndarray:
    """torch tensor / numpy / python number -> numpy (bfloat16 comes back as float32)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    return np.asarray(value)


def validate_inputs(specs: Sequence[TensorSpec], inputs: Sequence[Any], where: str) -> list[np.ndarray]:
    """Check count, shape and dtype kind of inputs against specs; return them as numpy.

    Raises one UserError naming every wrong input and the expected shape/dtype.
    """
    if len(inputs) != len(specs):
        expected = ", ".join(s.describe() for s in specs)
        raise UserError(
            f"{where} takes {len(specs)} input(s) ({expected}) but got {len(inputs)}; "
            f"pass one array per input, in that order."
        )
    arrays, errors = [], []
    for spec, value in zip(specs, inputs):
        arr = to_numpy(value)
        if len(arr.shape) != len(spec.shape) or any(
            isinstance(e, int) and e != a for e, a in zip(spec.shape, arr.shape)
        ):
            errors.append(f"input {spec.name!r} has shape {list(arr.shape)}, expected {list(spec.shape)}")
        want = np.dtype(spec.dtype)
        if arr.dtype != want:
            same_kind = np.issubdtype(arr.dtype, np.floating) == np.issubdtype(want, np.floating)
            if not same_kind:
                errors.append(f"input {spec.name!r} has dtype {arr.dtype}, expected {want}")
            arr = arr.astype(want)
        arrays.append(arr)
    if errors:
        raise UserError(f"{where}: " + "; ".join(errors) + ". Feed arrays of the shapes the model was exported with.")
    return arrays
