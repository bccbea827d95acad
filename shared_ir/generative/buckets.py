"""Buckets of a variable axis: one entry point per size, one set of weights.

    bundle = export_buckets(encoder, (input_ids, attention_mask), "input_ids:1=16,32,64")

The named input's axis takes each size; so does the same axis of every other input whose size
there equals the named one's in the example (an attention mask beside its token ids). Each
entry is a torch.export of the same module at its size, named `<input>_<size>`, so a backend
that lowers them together stores each weight once (android: one signature per bucket). The
example's values are tiled (or cut) to each size: they only have to trace as the model runs.
"""

from __future__ import annotations

import re
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["parse_buckets", "export_buckets", "bucket_entry"]

_SPEC = re.compile(r"^\s*(?P<name>[A-Za-z_][\w.]*)\s*:\s*(?P<axis>-?\d+)\s*=\s*(?P<sizes>[\d,\s]+)$")
_HELP = "--buckets takes INPUT:AXIS=SIZES, e.g. input_ids:1=16,32,64"


def bucket_entry(name: str, size: int) -> str:
    return f"{name}_{size}"


def parse_buckets(text: str) -> tuple[str, int, tuple[int, ...]]:
    """ "input_ids:1=16,32,64" -> ("input_ids", 1, (16, 32, 64))."""
    found = _SPEC.match(text or "")
    if not found:
        raise UserError(f"{_HELP}; got {text!r}.")
    sizes = sorted({int(s) for s in found["sizes"].split(",") if s.strip()})
    if not sizes or sizes[0] < 1:
        raise UserError(f"{_HELP} (positive sizes); got {text!r}.")
    return found["name"], int(found["axis"]), tuple(sizes)


def _resized(tensor, axis: int, size: int):
    import torch

    length = tensor.shape[axis]
    repeats = [1] * tensor.dim()
    repeats[axis] = -(-size // length)
    return torch.narrow(tensor.repeat(*repeats), axis, 0, size).contiguous()


def _input_names(model, count: int) -> list[str]:
    """The forward's positional parameter names (torch.export names its inputs after them)."""
    import inspect

    parameters = [
        p
        for p in inspect.signature(model.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(parameters) < count:
        raise UserError(
            f"{type(model).__name__}.forward takes *args; --buckets names inputs by the forward's parameter names."
        )
    return [p.name for p in parameters[:count]]


def export_buckets(model: Any, example_inputs: tuple, buckets: str, *, name: str | None = None):
    """A bucket ProgramBundle of `model` (see the module docstring)."""
    from tpuedge.shared_ir.capture import export
    from tpuedge.shared_ir.generative.bundle import ProgramBundle

    input_name, axis, sizes = parse_buckets(buckets)
    name = name or type(model).__name__.lower()
    names = _input_names(model, len(example_inputs))
    if input_name not in names:
        raise UserError(
            f"--buckets names input {input_name!r}, and {name} takes {', '.join(names)}; name one of those."
        )
    index = names.index(input_name)
    tensor = example_inputs[index]
    if not -tensor.dim() <= axis < tensor.dim():
        raise UserError(
            f"--buckets axis {axis} is outside input {input_name!r}'s {tensor.dim()} dims ({list(tensor.shape)})."
        )
    axis %= tensor.dim()
    along = [
        i
        for i, t in enumerate(example_inputs)
        if i == index or (t.dim() > axis and t.shape[axis] == tensor.shape[axis])
    ]
    entries = {}
    for size in sizes:
        inputs = tuple(_resized(t, axis, size) if i in along else t for i, t in enumerate(example_inputs))
        entries[bucket_entry(input_name, size)] = export(model, inputs, name=f"{name}.{bucket_entry(input_name, size)}")
    spec = {"input": input_name, "axis": axis, "sizes": list(sizes), "inputs_resized": [names[i] for i in along]}
    return ProgramBundle(entries, name=name, buckets=spec)
