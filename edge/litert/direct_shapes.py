"""Direct StableHLO lowerings (edge/litert/direct_lowerings.py) of ops that move values without
computing: view, squeeze, unsqueeze, expand, permute, clone, slice, select, split and constant
pads, each in the form the bridge's jax function lowers to, and each handing anything but its
plain case to litert-torch's own lowering.
"""

from __future__ import annotations

from tpuedge.edge.litert.direct_emit import (
    call,
    element_type,
    is_float,
    is_plain,
    is_static,
    named_arguments,
    result_type,
    result_types,
    slice_op,
)

__all__ = ["shape_lowerings"]


def _new_shape(kind: str):
    """view and squeeze ("reshape": a reshape), unsqueeze (a broadcast_in_dim that skips the new
    axis) and expand (a broadcast_in_dim), each nothing when the shape stays (as jax emits them)."""

    def lower(original, lctx, x, *args, **kwargs):
        if kwargs or not is_plain(lctx, x):
            return original(lctx, x, *args, **kwargs)
        from litert_converter.mlir import ir
        from litert_converter.mlir.dialects import stablehlo

        result = result_type(lctx)
        have, want = list(x.type.shape), list(result.shape)
        if have == want:
            return call(lctx, ("identity",), [x], lambda a: a)
        if kind == "reshape":
            return call(lctx, ("reshape",), [x], lambda a: stablehlo.reshape(result, a))
        if kind == "unsqueeze":
            new_axis = int(args[0]) % len(want)
            dims = [d for d in range(len(want)) if d != new_axis]
        else:  # expand: trailing axes aligned
            dims = list(range(len(want) - len(have), len(want)))
        attr = ir.DenseI64ArrayAttr.get(dims)
        return call(lctx, (kind, str(attr)), [x], lambda a: stablehlo.broadcast_in_dim(result, a, attr))

    return lower


def _permute(original, lctx, x, dims, **kwargs):
    if kwargs or not is_plain(lctx, x):
        return original(lctx, x, dims, **kwargs)
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    order = ir.DenseI64ArrayAttr.get([int(d) % len(x.type.shape) for d in dims])
    return call(lctx, ("permute", str(order)), [x], lambda a: stablehlo.transpose(a, order))


def _clone(original, lctx, x, **kwargs):
    import torch

    if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format) or not is_plain(
        lctx, x
    ):
        return original(lctx, x, **kwargs)
    return call(lctx, ("identity",), [x], lambda a: a)


def _slice(original, lctx, x, *args, **kwargs):
    """slice.Tensor (x, dim, start, end, step), static: a stablehlo.slice, nothing for a step-1
    slice of the whole axis (jnp's basic indexing, which the bridge takes for step 1; jax.lax.slice
    for a larger step, an op even where it keeps everything). An empty result goes to litert-torch."""
    import sys

    named = named_arguments(args, kwargs, ("dim", "start", "end", "step"))
    if named is None:
        return original(lctx, x, *args, **kwargs)
    dim, start, end, step = (named.get(k, d) for k, d in (("dim", 0), ("start", None), ("end", None), ("step", 1)))
    if (
        not is_plain(lctx, x)
        or not is_static(x)
        or not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (dim, start, end, step))
        or dim is None
        or not step
        or step < 1
    ):
        return original(lctx, x, *args, **kwargs)
    shape = list(x.type.shape)
    dim %= len(shape)
    first, stop, _ = slice(start, shape[dim] if end == sys.maxsize else end, step).indices(shape[dim])
    if stop <= first:
        return original(lctx, x, *args, **kwargs)
    if step == 1 and (first, stop) == (0, shape[dim]):
        return call(lctx, ("identity",), [x], lambda a: a)
    return call(lctx, ("slice", dim, first, stop, step), [x], lambda a: slice_op(a, dim, first, stop, step))


def _select(original, lctx, x, dim, index, **kwargs):
    """select.int (x, dim, index): jax.lax.index_in_dim's form, a one-wide slice (always) then a
    reshape dropping the axis."""
    if kwargs or not is_plain(lctx, x) or not is_static(x) or not isinstance(dim, int) or not isinstance(index, int):
        return original(lctx, x, dim, index, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    shape = list(x.type.shape)
    axis = dim % len(shape)
    at = index + shape[axis] if index < 0 else index
    if not 0 <= at < shape[axis]:
        return original(lctx, x, dim, index, **kwargs)
    result = result_type(lctx)
    return call(lctx, ("select", axis, at), [x], lambda a: stablehlo.reshape(result, slice_op(a, axis, at, at + 1, 1)))


def _split(original, lctx, x, split_sizes, dim=0, **kwargs):
    """split_with_sizes (x, sizes, dim): one step-1 slice per part, as jnp's basic indexing writes
    each (a part that is the whole axis: the input itself)."""
    results = result_types(lctx) if lctx.node is not None else None
    sizes = split_sizes
    if (
        kwargs
        or results is None
        or not isinstance(dim, int)
        or not isinstance(sizes, (list, tuple))
        or not all(isinstance(n, int) and n > 0 for n in sizes)
        or len(results) != len(sizes)
        or not is_static(x)
        or not all(element_type(x) == t.element_type for t in results)
    ):
        return original(lctx, x, split_sizes, dim, **kwargs)
    shape = list(x.type.shape)
    axis = dim % len(shape)
    if sum(sizes) != shape[axis]:
        return original(lctx, x, split_sizes, dim, **kwargs)
    bounds = [(sum(sizes[:i]), sum(sizes[: i + 1])) for i in range(len(sizes))]

    def body(a):
        return [a if (start, stop) == (0, shape[axis]) else slice_op(a, axis, start, stop, 1) for start, stop in bounds]

    return call(lctx, ("split", axis, tuple(sizes)), [x], body, results=results)


def _pad(original, lctx, x, pad, value=0, **kwargs):
    """constant_pad_nd (x, pad, value) with pads >= 0: one stablehlo.pad, the value a scalar
    constant of x's type (jax.lax.pad's form)."""
    if (
        kwargs
        or not is_plain(lctx, x)
        or not is_float(x)
        or not is_static(x)
        or not isinstance(pad, (list, tuple))
        or len(pad) % 2
        or len(pad) // 2 > len(x.type.shape)
        or not all(isinstance(p, int) and p >= 0 for p in pad)
        or not isinstance(value, (int, float))
        or isinstance(value, bool)
    ):
        return original(lctx, x, pad, value, **kwargs)
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo
    from litert_torch.backend.lowerings import utils

    rank = len(x.type.shape)
    low, high = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists (before, after) from the last axis backwards
        low[rank - 1 - i], high[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]

    def body(a):
        fill = utils.splat(float(value), element_type(a))
        return stablehlo.pad(
            a, fill, ir.DenseI64ArrayAttr.get(low), ir.DenseI64ArrayAttr.get(high), ir.DenseI64ArrayAttr.get([0] * rank)
        )

    return call(lctx, ("pad", tuple(low), tuple(high), float(value)), [x], body)


def shape_lowerings() -> dict:
    """aten overload -> its direct lowering, for litert-torch's registry (edge/litert/direct_lowerings.py)."""
    import torch

    aten = torch.ops.aten
    return {
        aten.unsqueeze.default: _new_shape("unsqueeze"),
        aten.squeeze.dims: _new_shape("reshape"),
        aten.squeeze.dim: _new_shape("reshape"),
        aten.expand.default: _new_shape("expand"),
        aten.permute.default: _permute,
        aten.clone.default: _clone,
        aten.view.default: _new_shape("reshape"),
        aten._unsafe_view.default: _new_shape("reshape"),
        aten.slice.Tensor: _slice,
        aten.select.int: _select,
        aten.split_with_sizes.default: _split,
        aten.constant_pad_nd.default: _pad,
    }
