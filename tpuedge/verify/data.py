"""Evaluation data for `verify`: loaded, checked against the Program's inputs, laid out as rows.

Accepted forms (arrays keyed by the Program's input names, first axis = samples):
- a `.npz` file or a dict of arrays, optionally with a labels array under its own key;
- one array, for a single-input model;
- a list of input tuples (what `calibration()` / `evaluation()` helpers return).

An input exported with shape (B, ...) takes data of shape (N, ...) — samples along the batch
axis — or (N, B, ...) — one whole model call per sample. Either way the data becomes "rows"
along the batch axis, which the runner regroups into calls of the runtime's batch size.
Every mismatch is one UserError that names the input, the shape found and the shape expected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import TensorSpec, to_numpy

__all__ = ["VerifyData", "load_data"]


@dataclass(frozen=True)
class VerifyData:
    """One array per Program input; `rows[i].shape == (N, *spec.shape[1:])` (or whole calls)."""

    rows: list[np.ndarray]
    labels: np.ndarray | None
    count: int
    whole_calls: bool  # True: each row is one complete model call (inputs without a batch axis)
    source: str

    def head(self, count: int) -> "VerifyData":
        """The first `count` samples (per-layer numerics use a subset)."""
        count = min(count, self.count)
        labels = None if self.labels is None else self.labels[:count]
        return VerifyData([r[:count] for r in self.rows], labels, count, self.whole_calls, self.source)


def _shape_text(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _read_mapping(data: Any) -> tuple[dict[str, np.ndarray] | None, list[np.ndarray] | None, str]:
    """-> (named arrays, positional arrays, description)."""
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file():
            raise UserError(
                f"Data file {path} does not exist; pass a .npz with one array per model input (first axis = samples)."
            )
        from tpuedge.quantize.array_files import read_arrays  # the one .npz/.npy reader

        arrays = read_arrays(path, "Data file")
        if path.suffix == ".npy":
            return None, list(arrays.values()), str(path)
        return arrays, None, str(path)
    if isinstance(data, Mapping):
        return {str(k): to_numpy(v) for k, v in data.items()}, None, "dict"
    if isinstance(data, np.ndarray) or hasattr(data, "detach"):
        return None, [to_numpy(data)], "array"
    if isinstance(data, (list, tuple)) and data:
        samples = [s if isinstance(s, (list, tuple)) else (s,) for s in data]
        width = len(samples[0])
        if any(len(s) != width for s in samples):
            raise UserError(
                "The data samples have different numbers of inputs; give every sample one array per model input."
            )
        try:
            stacked = [np.stack([to_numpy(s[i]) for s in samples]) for i in range(width)]
        except ValueError as exc:
            raise UserError(
                f"The data samples don't all have the same shape ({exc}); give samples of one shape."
            ) from exc
        return None, stacked, f"{len(samples)} samples"
    raise UserError(
        f"Can't read data of type {type(data).__name__}; pass a .npz path, a dict of arrays keyed by input "
        "name, one array (single-input models) or a list of input tuples."
    )


def _to_rows(spec: TensorSpec, array: np.ndarray, where: str) -> tuple[np.ndarray, bool]:
    """-> (rows, whole_calls). Raise a UserError for a shape that fits neither layout."""
    shape = tuple(spec.shape)
    has_batch = len(shape) > 0
    tail_ok = (
        has_batch
        and array.ndim == len(shape)
        and all(not isinstance(e, int) or e == a for e, a in zip(shape[1:], array.shape[1:]))
    )
    whole_ok = array.ndim == len(shape) + 1 and all(
        not isinstance(e, int) or e == a for e, a in zip(shape, array.shape[1:])
    )
    if has_batch and isinstance(shape[0], int) and whole_ok:
        # (N, B, ...) -> N*B rows along the batch axis
        return array.reshape((-1, *array.shape[2:])), False
    if tail_ok:
        return array, False
    if whole_ok:
        return array, True
    expected = [_shape_text(("N", *shape[1:]))] if has_batch else []
    expected.append(_shape_text(("N", *shape)))
    raise UserError(
        f"{where}: input {spec.name!r} has shape {_shape_text(array.shape)}, expected "
        f"{' or '.join(expected)} (N samples of the exported shape {_shape_text(shape)}). "
        "Save the evaluation data with the shape the model was exported with."
    )


def _check_dtype(spec: TensorSpec, array: np.ndarray, where: str) -> np.ndarray:
    want = np.dtype(spec.dtype)
    if np.issubdtype(want, np.floating):
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise UserError(
                f"{where}: input {spec.name!r} has dtype {array.dtype}, expected {want}; save it as {want}."
            )
        array = array.astype(want)
        if not np.all(np.isfinite(array)):
            raise UserError(f"{where}: input {spec.name!r} contains NaN or Inf; remove those samples.")
        return array
    if not np.issubdtype(array.dtype, np.integer) and array.dtype != np.bool_:
        raise UserError(f"{where}: input {spec.name!r} has dtype {array.dtype}, expected integer {want}.")
    return array.astype(want)


def load_data(data: Any, specs: Sequence[TensorSpec], *, labels: Any = None) -> VerifyData:
    """Read and check evaluation data for a Program with input `specs`.

    `labels` is the key of a labels array in the npz/dict, or an array of class indices.
    """
    named, positional, source = _read_mapping(data)
    where = f"Data {source}"
    label_array = None
    if isinstance(labels, str):
        if named is None:
            raise UserError(
                f"{where} has no named arrays, so there is no labels key {labels!r}; save data and labels in one .npz."
            )
        if labels not in named:
            raise UserError(
                f"{where} has no array {labels!r} for the labels (it has: {', '.join(sorted(named)) or 'nothing'}); "
                "pass --labels with one of those keys."
            )
        label_array = named.pop(labels)
    elif labels is not None:
        label_array = to_numpy(labels)

    if named is not None:
        missing = [s.name for s in specs if s.name not in named]
        if missing and len(specs) == 1 and len(named) == 1:
            positional = list(named.values())  # one input, one array: the name doesn't matter
        elif missing:
            raise UserError(
                f"{where} has no array for input(s) {', '.join(repr(m) for m in missing)} (it has: "
                f"{', '.join(sorted(named)) or 'nothing'}); save one array per model input under the input's name "
                f"({', '.join(s.describe() for s in specs)})."
            )
        else:
            positional = [named[s.name] for s in specs]
    if len(positional) != len(specs):
        raise UserError(
            f"{where} gives {len(positional)} array(s) but the model takes {len(specs)} input(s) "
            f"({', '.join(s.describe() for s in specs)}); give one array per input."
        )

    rows, modes = [], set()
    for spec, array in zip(specs, positional):
        array = _check_dtype(spec, np.asarray(array), where)
        r, whole = _to_rows(spec, array, where)
        rows.append(r)
        modes.add(whole)
    counts = {len(r) for r in rows}
    if len(counts) != 1 or len(modes) != 1:
        raise UserError(
            f"{where}: the inputs hold different numbers of samples ({', '.join(str(len(r)) for r in rows)}); "
            "give every input the same number of samples."
        )
    count = counts.pop()
    if count == 0:
        raise UserError(f"{where} holds no samples; give at least one.")
    if label_array is not None:
        label_array = np.asarray(label_array)
        if label_array.ndim != 1 or len(label_array) != count or not np.issubdtype(label_array.dtype, np.integer):
            raise UserError(
                f"{where}: labels must be {count} integer class indices (one per sample), got "
                f"{label_array.dtype} {_shape_text(label_array.shape)}."
            )
    return VerifyData(rows, label_array, count, modes.pop(), source)
