"""Calibration data: load it from what users have, check it against the program's inputs.

STABLE INTERNAL API (android and mcu targets call it the same way):

    samples = load_calibration(spec_or_arrays, program, min_samples=8)
    # -> list of samples, each a list with one np.ndarray per program input, in input order

`spec_or_arrays` may be:
  - "data.npz": arrays keyed by input name, first axis = samples (a single-input model also
    takes one unnamed array, `numpy.savez(path, array)`; any other name must match the input's);
  - "data.npy": one array, first axis = samples (single-input models);
  - a folder of .npz/.npy files (read in name order, samples concatenated);
  - "package.module:function" or "path/file.py:function": function() returns an iterable of
    samples, each a tuple of arrays (one per input), a dict keyed by input name, or one array;
  - the same objects directly: an array, a dict of arrays, or an iterable of samples.
"First axis = samples" accepts both [N, *input_shape] and, for batched inputs,
[N * batch, *input_shape[1:]] (split into batches). Every problem (wrong shape or dtype, too
few samples, NaN/Inf, missing inputs) is one UserError naming the input, the expected shape
and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuedge.quantize.array_files import UNNAMED, read_arrays
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import TensorSpec, to_numpy

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["load_calibration", "validate_samples", "Samples"]

Samples = list[list[np.ndarray]]

_FORMATS = (
    "--calibration takes an .npz keyed by input name (first axis = samples), an .npy for a "
    "single-input model, a folder of those, or `module:function` / `file.py:function` returning "
    "an iterable of input tuples"
)


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _fits(actual: tuple, expected: tuple) -> bool:
    return len(actual) == len(expected) and all(not isinstance(e, int) or e == a for a, e in zip(actual, expected))


def _split_stacked(spec: TensorSpec, arr: np.ndarray, where: str) -> list[np.ndarray]:
    """[N, *shape] -> N samples; [N*B, *shape[1:]] -> N samples of batch B."""
    shape = tuple(spec.shape)
    if arr.ndim == len(shape) + 1 and _fits(arr.shape[1:], shape):
        return [arr[i] for i in range(arr.shape[0])]
    if shape and arr.ndim == len(shape) and isinstance(shape[0], int) and _fits(arr.shape[1:], shape[1:]):
        batch = shape[0]
        if arr.shape[0] % batch == 0:
            return [arr[i : i + batch] for i in range(0, arr.shape[0], batch)]
    raise UserError(
        f"Calibration input {spec.name!r} from {where} has shape {_shape_text(arr.shape)}, but the model's "
        f"input {spec.name!r} is {_shape_text(shape)}; store it as [N, {', '.join(str(d) for d in shape)}] "
        f"(first axis = samples)."
    )


def _arrays_to_samples(arrays: Mapping[str, Any], specs: list[TensorSpec], where: str) -> Samples:
    names = [s.name for s in specs]
    arrays = dict(arrays)
    # A single-input model takes one UNNAMED array (numpy.savez(path, array) stores it as
    # "arr_0"). A named array that is not the input's name is refused rather than guessed:
    # it is often data written for another model, and a silent rename hides that.
    if len(specs) == 1 and list(arrays) == [UNNAMED]:
        arrays = {names[0]: arrays[UNNAMED]}
    missing = [n for n in names if n not in arrays]
    extra = [k for k in arrays if k not in names]
    if missing or extra:
        raise UserError(
            f"Calibration data {where} has arrays {sorted(arrays)} but the model's inputs are {names}"
            + (f" (missing: {missing})" if missing else "")
            + (f" (unknown: {extra})" if extra else "")
            + "; key each array by its input name, e.g. np.savez(path, "
            + ", ".join(f"{n}=..." for n in names)
            + ")"
            + (", or save one unnamed array, np.savez(path, array)." if len(names) == 1 else ".")
        )
    per_input = [_split_stacked(spec, to_numpy(arrays[spec.name]), where) for spec in specs]
    counts = {spec.name: len(p) for spec, p in zip(specs, per_input)}
    if len(set(counts.values())) > 1:
        raise UserError(
            f"Calibration data {where} has different sample counts per input ({counts}); "
            "give every input the same number of samples along the first axis."
        )
    return [list(sample) for sample in zip(*per_input)]


def _load_file(path: Path, specs: list[TensorSpec]) -> Samples:
    arrays = read_arrays(path, "Calibration file")  # an .npy comes back as one unnamed array
    if path.suffix == ".npy" and len(specs) != 1:
        raise UserError(
            f"{path} is one .npy array but the model has {len(specs)} inputs "
            f"({', '.join(s.name for s in specs)}); use an .npz keyed by input name."
        )
    return _arrays_to_samples(arrays, specs, str(path))


def _load_path(path: Path, specs: list[TensorSpec]) -> Samples:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise UserError(f"Calibration folder {path} holds no .npz or .npy files; {_FORMATS}.")
        samples: Samples = []
        for file in files:
            samples += _load_file(file, specs)
        return samples
    if path.suffix not in (".npz", ".npy"):
        raise UserError(f"Calibration file {path} is neither .npz nor .npy; {_FORMATS}.")
    return _load_file(path, specs)


def _sample_from_item(item: Any, specs: list[TensorSpec], index: int) -> list[np.ndarray]:
    if isinstance(item, Mapping):
        missing = [s.name for s in specs if s.name not in item]
        if missing:
            raise UserError(
                f"Calibration sample {index} is a dict without input(s) {missing}; key it by the model's "
                f"input names {[s.name for s in specs]}."
            )
        values = [item[s.name] for s in specs]
    elif isinstance(item, (tuple, list)):
        values = list(item)
    else:
        values = [item]
    if len(values) != len(specs):
        raise UserError(
            f"Calibration sample {index} has {len(values)} array(s) but the model takes {len(specs)} input(s) "
            f"({', '.join(s.describe() for s in specs)}); yield one tuple of arrays per sample, in input order."
        )
    return [to_numpy(v) for v in values]


def _from_iterable(items: Iterable[Any], specs: list[TensorSpec], where: str) -> Samples:
    try:
        return [_sample_from_item(item, specs, i) for i, item in enumerate(items)]
    except UserError:
        raise
    except Exception as exc:  # the user's generator raised
        raise UserError(
            f"Reading calibration samples from {where} raised {type(exc).__name__}: {exc}; fix the data source."
        ) from exc


def _from_function(spec: str, specs: list[TensorSpec]) -> Samples:
    from tpuedge.shared_ir.model_spec import load_factory

    fn = load_factory(spec)
    try:
        result = fn()
    except Exception as exc:
        raise UserError(
            f"The calibration function {spec} raised {type(exc).__name__}: {exc}; fix it so it runs on its own."
        ) from exc
    if isinstance(result, Mapping) or isinstance(result, np.ndarray):
        return _arrays_to_samples(result if isinstance(result, Mapping) else {specs[0].name: result}, specs, spec)
    if not isinstance(result, Iterable):
        raise UserError(
            f"The calibration function {spec} returned {type(result).__name__}; return an iterable of input tuples."
        )
    return _from_iterable(result, specs, spec)


def _looks_like_function_spec(text: str) -> bool:
    where, sep, name = text.rpartition(":")
    return bool(sep) and bool(where) and name.isidentifier() and not Path(text).exists()


def validate_samples(
    samples: Samples, specs: list[TensorSpec], *, min_samples: int = 1, where: str = "calibration data"
) -> Samples:
    """Check every sample against the input specs; cast to the input dtypes; one UserError for all."""
    errors: list[str] = []
    checked: Samples = []
    for i, sample in enumerate(samples):
        row = []
        for spec, arr in zip(specs, sample):
            shape = tuple(spec.shape)
            if not _fits(arr.shape, shape) and shape and shape[0] == 1 and _fits((1, *arr.shape), shape):
                arr = arr[None]  # a sample given without its batch axis of 1
            if not _fits(arr.shape, shape):
                errors.append(
                    f"input {spec.name!r} sample {i} has shape {_shape_text(arr.shape)}, expected {_shape_text(shape)}"
                )
                row.append(arr)
                continue
            want = np.dtype(spec.dtype)
            is_float, want_float = np.issubdtype(arr.dtype, np.floating), np.issubdtype(want, np.floating)
            if arr.dtype != want and (is_float != want_float or arr.dtype == np.bool_ and want != np.bool_):
                errors.append(
                    f"input {spec.name!r} sample {i} has dtype {arr.dtype}, expected {want} with shape {_shape_text(shape)}"
                )
                row.append(arr)
                continue
            arr = np.ascontiguousarray(arr, dtype=want)
            if want_float and not np.isfinite(arr).all():
                bad = int((~np.isfinite(arr)).sum())
                errors.append(f"input {spec.name!r} sample {i} has {bad} NaN/Inf value(s)")
            row.append(arr)
        checked.append(row)
        if len(errors) >= 5:
            break
    if errors:
        raise UserError(
            f"Calibration data ({where}) does not fit the model: "
            + "; ".join(errors[:5])
            + ("; ..." if len(errors) > 5 else "")
            + ". Give finite arrays of the shapes and dtypes the model was exported with "
            + f"({', '.join(s.describe() for s in specs)})."
        )
    if len(checked) < min_samples:
        raise UserError(
            f"Calibration data ({where}) has {len(checked)} sample(s) but int8 quantization needs at least "
            f"{min_samples} to estimate activation ranges; give more representative samples "
            f"(a few hundred is typical) of {', '.join(s.describe() for s in specs)}."
        )
    return checked


def load_calibration(spec_or_arrays: Any, program: "Program", *, min_samples: int = 8) -> Samples:
    """Load and validate calibration samples for `program` (see the module docstring).

    Returns a list of samples; each is a list with one np.ndarray per program input (in
    `program.inputs` order, cast to its dtype, exact input shape). Raises UserError.
    """
    specs = list(program.inputs)
    if spec_or_arrays is None:
        raise UserError(f"No calibration data given; {_FORMATS}.")
    where = str(spec_or_arrays) if isinstance(spec_or_arrays, (str, Path)) else type(spec_or_arrays).__name__
    if isinstance(spec_or_arrays, (str, Path)):
        text = str(spec_or_arrays)
        if isinstance(spec_or_arrays, str) and _looks_like_function_spec(text):
            samples = _from_function(text, specs)
        else:
            path = Path(text)
            if not path.exists():
                raise UserError(f"Calibration data {path} does not exist; {_FORMATS}.")
            samples = _load_path(path, specs)
    elif isinstance(spec_or_arrays, np.ndarray) or hasattr(spec_or_arrays, "detach"):
        if len(specs) != 1:
            raise UserError(
                f"One calibration array was given but the model takes {len(specs)} inputs; pass a dict keyed by "
                f"input name ({', '.join(s.name for s in specs)})."
            )
        samples = _arrays_to_samples({specs[0].name: spec_or_arrays}, specs, "the given array")
    elif isinstance(spec_or_arrays, Mapping):
        samples = _arrays_to_samples(spec_or_arrays, specs, "the given dict")
    elif isinstance(spec_or_arrays, Iterable):
        samples = _from_iterable(spec_or_arrays, specs, where)
    else:
        raise UserError(f"Calibration data of type {type(spec_or_arrays).__name__} is not understood; {_FORMATS}.")
    return validate_samples(samples, specs, min_samples=min_samples, where=where)
