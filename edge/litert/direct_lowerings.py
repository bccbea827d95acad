"""StableHLO for the commonest plain ops, emitted directly instead of through litert-torch's jax bridge.

litert-torch lowers float add/sub/mul/div, relu, clamp, hardtanh, sigmoid, tanh, sqrt, permute,
view, squeeze, unsqueeze, expand, clone, mm, bmm, mean, softmax, max_pool2d, slice, select,
split_with_sizes and constant_pad_nd through its jax bridge: every distinct (op, shapes, arguments)
is a `jax.jit(...).lower()`, a StableHLO -> VHLO serialization, a parse and an inlining, about
8 ms each. A CNN has hundreds of distinct ones (MobileNetV3-small: 246, about 2 s of its 4 s MLIR
lowering). These lowerings emit what the bridge's jax functions lower to, in the bridge's form (a
private function per distinct computation, called where the op was; jax's broadcast steps and
constants), in microseconds; the converter then writes the same flatbuffer, byte for byte
(tests/test_direct_lowerings.py compares them). A model all of whose bridged ops are taken here
never starts jax's lowering machinery: its first use in a process cost ~15 MB and ~20 ms.

Only the plain case is taken here: operands of the result's element type (and, for float32
arithmetic, integer ones converted as jax converts them), no extra arguments (alpha, rounding
modes, memory formats other than the default). Anything else goes to the lowering litert-torch
registered, unchanged. `direct_lowerings()` installs them for the length of one lowering, for
the threads inside it (edge/litert/litert_torch_compat.py: counted, under a lock, so concurrent builds
share one installation), then puts litert-torch's own back: a user's `litert_torch.convert`, in
this process or in another thread meanwhile, lowers with litert-torch's own.
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["direct_lowerings"]

_ID_LOCK = threading.Lock()
_plugin_class = None  # the context plugin class, made once litert-torch is imported
_next_id = 0  # private function names, unique in a process (inlined away: never in a file)


def _element_type(value):
    return value.type.element_type


def _result_types(lctx) -> list | None:
    """The node's static-shaped result types, else None (and the op goes to litert-torch, which
    copes with what this does not: no tensor meta, dynamic sizes)."""
    from litert_torch.backend.lowerings import utils

    try:
        types = utils.node_meta_to_ir_types(lctx.node)
    except (RuntimeError, TypeError, ValueError, KeyError):
        return None
    return list(types) if types and all(t.has_static_shape for t in types) else None


def _result_type(lctx):
    """The node's one static-shaped result type, else None (several results too)."""
    types = _result_types(lctx)
    return types[0] if types is not None and len(types) == 1 else None


def _plain(lctx, *values) -> bool:
    """Tensors (MLIR values) of one element type, and the node's one result of that type too."""
    from litert_converter.mlir import ir

    if lctx.node is None or not all(
        isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType) for v in values
    ):
        return False
    result = _result_type(lctx)
    return result is not None and all(_element_type(v) == result.element_type for v in values)


def _static(x) -> bool:
    """A ranked tensor of static shape and rank >= 1 (what reductions, slices and pads take)."""
    from litert_converter.mlir import ir

    return (
        isinstance(x, ir.Value)
        and isinstance(x.type, ir.RankedTensorType)
        and x.type.has_static_shape
        and bool(x.type.shape)
    )


def _functions(lctx) -> dict:
    """This lowering's private functions, by what they compute (kept on its context, as a plugin)."""
    global _plugin_class
    if _plugin_class is None:
        from litert_torch.backend.lowerings import context

        class DirectFunctions(context.LoweringContextPlugin):
            def __init__(self):
                self.by_key: dict = {}

        _plugin_class = DirectFunctions
    if not lctx.has_plugin(_plugin_class):
        lctx.add_plugin(_plugin_class())
    return lctx.get_plugin(_plugin_class).by_key


def _call(lctx, key: tuple, operands: list, body, results: list | None = None):
    """`body(*arguments)`'s ops in a private function, called from here, as the jax bridge leaves
    them: one function per distinct computation (`key`, with the operand types), its ops without a
    location. The converter inlines calls late; when it inlines, and what it can merge then,
    decide which ops it fuses and the names it gives them, so this form gets the bridge's file.
    `results`: the types of a node with several results (body returns a list; so does this)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import func

    global _next_id
    types = results or [_result_type(lctx)]
    key = (*key, tuple(str(v.type) for v in operands), tuple(str(t) for t in types))
    functions = _functions(lctx)
    function = functions.get(key)
    if function is None:
        with ir.InsertionPoint.at_block_begin(lctx.ir_module.body), ir.Location.unknown():
            with _ID_LOCK:
                _next_id += 1
                name = f"tpuedge_direct_{_next_id}"
            function = func.FuncOp(name, ir.FunctionType.get([v.type for v in operands], types), visibility="private")
            block = function.add_entry_block()
            with ir.InsertionPoint(block):
                returned = body(*block.arguments)
                func.ReturnOp(list(returned) if results else [returned])
        functions[key] = function
    called = func.CallOp(function, operands).results
    return list(called) if results else called[0]


def _broadcast(value, shape: list[int]):
    """`value` broadcast to `shape` as numpy does (trailing dimensions aligned), in jax's steps: a
    lower rank first gains leading ones, then the sizes grow (the converter fuses a bias add that
    comes in these steps as it does the bridge's)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    def step(v, to: list[int], dims: list[int]):
        return stablehlo.broadcast_in_dim(
            ir.RankedTensorType.get(to, _element_type(v)), v, ir.DenseI64ArrayAttr.get(dims)
        )

    have, target = list(value.type.shape), len(shape)
    if have == shape:
        return value
    if not have:
        return step(value, shape, [])
    if len(have) < target:
        have = [1] * (target - len(have)) + have
        value = step(value, have, list(range(target - len(value.type.shape), target)))
    return value if have == shape else step(value, shape, list(range(target)))


def _float(value) -> bool:
    from litert_converter.mlir import ir

    return isinstance(_element_type(value), ir.FloatType)


def _splat_like(x, value):
    """A scalar constant of x's element type broadcast to x's shape (jax: constant, broadcast_in_dim)."""
    from litert_torch.backend.lowerings import utils

    return _broadcast(utils.splat(value, _element_type(x)), list(x.type.shape))


def _is_int(value) -> bool:
    from litert_converter.mlir import ir

    element = _element_type(value)
    return isinstance(element, ir.IntegerType) and element.width > 1


def _binary(stablehlo_op: str):
    """aten's add/sub/mul/div, .Tensor (`other` a tensor, or a number litert-torch made a 0-d
    tensor: int32 for an int) and .Scalar (`other` a Python number): float32 results only, the one
    promotion the bridge's jax lowering does simply (a float64 promotion comes back to float32)."""

    def lower(original, lctx, self, other, **kwargs):
        from litert_converter.mlir import ir
        from litert_converter.mlir.dialects import stablehlo
        from litert_torch.backend.lowerings import utils

        result = _result_type(lctx) if lctx.node is not None else None
        number = isinstance(other, (int, float)) and not isinstance(other, bool)
        tensors = [self] if number else [self, other]
        if (
            kwargs
            or result is None
            or not isinstance(result.element_type, ir.F32Type)
            or not all(isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType) for v in tensors)
            or not all(_element_type(v) == result.element_type or _is_int(v) for v in tensors)
        ):
            return original(lctx, self, other, **kwargs)
        shape = list(result.shape)

        def body(*arguments):
            promoted = [
                a
                if _element_type(a) == result.element_type  # .astype(float32): an integer converted
                else stablehlo.convert(ir.RankedTensorType.get(a.type.shape, result.element_type), a)
                for a in arguments
            ]
            if number:  # jnp.array(other, dtype=float32): a constant
                promoted.append(utils.splat(float(other), result.element_type))
            a, b = promoted
            return getattr(stablehlo, stablehlo_op)(_broadcast(a, shape), _broadcast(b, shape))

        return _call(lctx, (stablehlo_op, other if number else None), tensors, body)

    return lower


def _sigmoid(original, lctx, x, **kwargs):
    from litert_converter.mlir import ir

    if kwargs or not _plain(lctx, x) or not isinstance(_element_type(x), ir.F32Type):
        return original(lctx, x, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    def body(a):  # jax.nn.sigmoid's form: 1 / (1 + exp(-a))
        exp = stablehlo.exponential(stablehlo.negate(a))
        total = stablehlo.add(_splat_like(a, 1.0), exp)
        return stablehlo.divide(_splat_like(a, 1.0), total)

    return _call(lctx, ("sigmoid",), [x], body)


def _matmul(original, lctx, x, y, **kwargs):
    """mm and bmm (`x @ y`): one dot_general, as the bridge's jax writes it. A batch of one goes to
    litert-torch: jax writes that as reshapes around a 2-D product."""
    if (
        kwargs
        or not _plain(lctx, x, y)
        or not _float(x)
        or len(x.type.shape) != len(y.type.shape)
        or 1 in list(x.type.shape)[:-2]
        or 1 in list(y.type.shape)[:-2]
    ):
        return original(lctx, x, y, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    rank = len(x.type.shape)
    batch = list(range(rank - 2))
    numbers = stablehlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=batch,
        rhs_batching_dimensions=batch,
        lhs_contracting_dimensions=[rank - 1],
        rhs_contracting_dimensions=[rank - 2],
    )
    result = _result_type(lctx)
    return _call(lctx, ("dot",), [x, y], lambda a, b: stablehlo.dot_general(result, a, b, numbers))


def _new_shape(kind: str):
    """view and squeeze ("reshape": a reshape), unsqueeze (a broadcast_in_dim that skips the new
    axis) and expand (a broadcast_in_dim), each nothing when the shape stays (as jax emits them)."""

    def lower(original, lctx, x, *args, **kwargs):
        if kwargs or not _plain(lctx, x):
            return original(lctx, x, *args, **kwargs)
        from litert_converter.mlir import ir
        from litert_converter.mlir.dialects import stablehlo

        result = _result_type(lctx)
        have, want = list(x.type.shape), list(result.shape)
        if have == want:
            return _call(lctx, ("identity",), [x], lambda a: a)
        if kind == "reshape":
            return _call(lctx, ("reshape",), [x], lambda a: stablehlo.reshape(result, a))
        if kind == "unsqueeze":
            new_axis = int(args[0]) % len(want)
            dims = [d for d in range(len(want)) if d != new_axis]
        else:  # expand: trailing axes aligned
            dims = list(range(len(want) - len(have), len(want)))
        attr = ir.DenseI64ArrayAttr.get(dims)
        return _call(lctx, (kind, str(attr)), [x], lambda a: stablehlo.broadcast_in_dim(result, a, attr))

    return lower


def _permute(original, lctx, x, dims, **kwargs):
    if kwargs or not _plain(lctx, x):
        return original(lctx, x, dims, **kwargs)
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    order = ir.DenseI64ArrayAttr.get([int(d) % len(x.type.shape) for d in dims])
    return _call(lctx, ("permute", str(order)), [x], lambda a: stablehlo.transpose(a, order))


def _clone(original, lctx, x, **kwargs):
    import torch

    if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format) or not _plain(lctx, x):
        return original(lctx, x, **kwargs)
    return _call(lctx, ("identity",), [x], lambda a: a)


def _relu(original, lctx, x, **kwargs):
    if kwargs or not _plain(lctx, x) or not _float(x):
        return original(lctx, x, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    return _call(lctx, ("relu",), [x], lambda a: stablehlo.maximum(a, _splat_like(a, 0.0)))


def _clamp(original, lctx, x, min=None, max=None, **kwargs):  # noqa: A002 - aten's argument names
    bounds = [b for b in (min, max) if b is not None]
    if (
        kwargs
        or not bounds
        or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        or not _plain(lctx, x)
        or not _float(x)
    ):
        return original(lctx, x, min, max, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    def clip(a):
        # jnp.clip's form: each bound a 64-bit scalar (int64 for a Python int, else float64),
        # converted to a's type and broadcast; maximum(low, a), then minimum(high, that)
        from litert_converter.mlir import ir
        from litert_torch.backend.lowerings import utils

        def scalar(b):
            return utils.splat(b, ir.IntegerType.get_signless(64) if isinstance(b, int) else ir.F64Type.get())

        low, high = (None if b is None else scalar(b) for b in (min, max))
        for bound, op in ((low, stablehlo.maximum), (high, stablehlo.minimum)):
            if bound is not None:
                converted = stablehlo.convert(ir.RankedTensorType.get([], _element_type(a)), bound)
                a = op(_broadcast(converted, list(a.type.shape)), a)
        return a

    return _call(lctx, ("clamp", min, max), [x], clip)


def _hardtanh(original, lctx, x, min_val=-1, max_val=1, **kwargs):
    """hardtanh (x, min_val, max_val; relu6 is one): torchax writes it as jnp.clip, clamp's form."""

    def theirs(lctx, x, low, high, **rest):
        return original(lctx, x, min_val, max_val, **rest)

    return _clamp(theirs, lctx, x, min_val, max_val, **kwargs)


def _reduce(x, dims: list[int], init: float, combine: str):
    """x reduced over `dims` (in the order given, as jax keeps them) by stablehlo's `combine`
    ("add", "maximum") from the scalar `init`: jnp.sum's and jnp.max's form."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo
    from litert_torch.backend.lowerings import utils

    element = _element_type(x)
    kept = [size for axis, size in enumerate(x.type.shape) if axis not in dims]
    op = stablehlo.ReduceOp(
        [ir.RankedTensorType.get(kept, element)], [x], [utils.splat(init, element)], ir.DenseI64ArrayAttr.get(dims)
    )
    return _combined_by(op, combine, element)


def _combined_by(op, combine: str, element):
    """A reduce or reduce_window `op` given its body: stablehlo's `combine` of two scalars of
    `element`; its one result."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    scalar = ir.RankedTensorType.get([], element)
    block = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        stablehlo.return_([getattr(stablehlo, combine)(*block.arguments)])
    return op.result


def _keep_dims(reduced, shape: list[int], dims: list[int]):
    """A reduction given back its reduced axes as ones (jax's keepdims: one broadcast_in_dim)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    kept = [axis for axis in range(len(shape)) if axis not in dims]
    ones = [1 if axis in dims else size for axis, size in enumerate(shape)]
    return stablehlo.broadcast_in_dim(
        ir.RankedTensorType.get(ones, _element_type(reduced)), reduced, ir.DenseI64ArrayAttr.get(kept)
    )


def _named(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict | None:
    """An aten op's arguments after the tensor, by name (positional ones in `names`' order); None
    where there are more, or others, than `names` (the op then goes to litert-torch)."""
    named = dict(zip(names, args), **kwargs)
    return named if len(args) <= len(names) and set(named) <= set(names) else None


def _axes(dims, rank: int) -> list[int] | None:
    """aten's dim list as jax canonicalizes it (each non-negative, order kept), None where the
    bridge's own form is not this one (no list, an empty one, a repeat)."""
    if not isinstance(dims, (list, tuple)) or not dims or not all(isinstance(d, int) for d in dims):
        return None
    axes = [d % rank for d in dims]
    return axes if len(set(axes)) == len(axes) else None


def _mean(original, lctx, x, *args, **kwargs):
    """mean.dim (x, dims, keepdim) and mean (x): jnp.mean's form, a sum divided by the count.
    A dtype argument, a 0-d input or an empty dim list go to litert-torch."""
    named = _named(args, kwargs, ("dim", "keepdim", "dtype"))
    if named is None:
        return original(lctx, x, *args, **kwargs)
    dims, keepdim = named.get("dim"), named.get("keepdim", False)
    rank = len(x.type.shape) if _plain(lctx, x) and _static(x) else 0
    axes = (list(range(rank)) if dims is None else _axes(dims, rank)) if rank else None
    if named.get("dtype") is not None or axes is None or not isinstance(keepdim, bool) or not _float(x):
        return original(lctx, x, *args, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    shape = list(x.type.shape)
    count = 1
    for axis in axes:
        count *= shape[axis]

    def body(a):
        total = _reduce(a, axes, 0.0, "add")
        if keepdim:
            total = _keep_dims(total, shape, axes)
        return stablehlo.divide(total, _splat_like(total, float(count)))

    return _call(lctx, ("mean", tuple(axes), keepdim), [x], body)


def _softmax(original, lctx, x, dim, half_to_float, **kwargs):
    """_softmax (x, dim, half_to_float=False): jax.nn.softmax's form, the maximum (from -inf) taken
    off before exp, then divided by the sum."""
    if kwargs or half_to_float or not _plain(lctx, x) or not _float(x) or not _static(x) or not isinstance(dim, int):
        return original(lctx, x, dim, half_to_float, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    shape = list(x.type.shape)
    axes = [dim % len(shape)]

    def spread(reduced):  # keepdims, then broadcast back to x's shape (a step only where it grows)
        return _broadcast(_keep_dims(reduced, shape, axes), shape)

    def body(a):
        top = _reduce(a, axes, float("-inf"), "maximum")
        top = stablehlo.maximum(_splat_like(top, float("-inf")), top)
        exp = stablehlo.exponential(stablehlo.subtract(a, spread(top)))
        return stablehlo.divide(exp, spread(_reduce(exp, axes, 0.0, "add")))

    return _call(lctx, ("softmax", axes[0]), [x], body)


def _pair(value, default: list[int] | None = None) -> list[int] | None:
    """An int or a 2-list of ints (max_pool2d's arguments) as a 2-list; `default` for []."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, value]
    if isinstance(value, (list, tuple)) and not value and default is not None:
        return list(default)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _max_pool2d(original, lctx, x, kernel_size, *args, **kwargs):
    """max_pool2d_with_indices of a 4-D float32 input: the bridge's form, one reduce_window from
    -inf (its padding as litert-torch works it out, ceil mode included) and indices of zeros (the
    bridge's too: TFLite's reduce_window has one output; a graph that reads them goes wrong either
    way, and litert-torch's table keeps max_pool2d without indices)."""
    from litert_converter.mlir import ir

    named = _named(args, kwargs, ("stride", "padding", "dilation", "ceil_mode"))
    if named is None:
        return original(lctx, x, kernel_size, *args, **kwargs)
    kernel = _pair(kernel_size)
    stride = _pair(named.get("stride", []), default=kernel)
    padding, dilation = _pair(named.get("padding", 0)), _pair(named.get("dilation", 1))
    ceil_mode = named.get("ceil_mode", False)
    results = _result_types(lctx) if lctx.node is not None else None
    if (
        None in (kernel, stride, padding, dilation)
        or not isinstance(ceil_mode, bool)
        or results is None
        or len(results) != 2
        or not _static(x)
        or len(x.type.shape) != 4
        or not isinstance(_element_type(x), ir.F32Type)
        or results[0].element_type != _element_type(x)
    ):
        return original(lctx, x, kernel_size, *args, **kwargs)
    import numpy as np
    from litert_converter.mlir.dialects import stablehlo
    from litert_torch.backend.lowerings import utils

    from tpuedge.edge.litert.litert_torch_compat import ceil_mode_padding

    spatial = ceil_mode_padding(padding, list(x.type.shape), kernel, stride, dilation, ceil_mode)
    if spatial is None:
        return original(lctx, x, kernel_size, *args, **kwargs)
    pairs = [(0, 0), (0, 0), *spatial]

    def body(a):
        op = stablehlo.ReduceWindowOp(
            [results[0]],
            [a],
            [utils.splat(float("-inf"), _element_type(a))],
            [1, 1, *kernel],
            window_strides=[1, 1, *stride],
            base_dilations=[1, 1, 1, 1],
            window_dilations=[1, 1, *dilation],
            padding=ir.DenseIntElementsAttr.get(np.asarray(pairs, np.int64)),
        )
        pooled = _combined_by(op, "maximum", _element_type(a))
        zero = utils.splat(0, results[1].element_type)
        return [pooled, stablehlo.broadcast_in_dim(results[1], zero, ir.DenseI64ArrayAttr.get([]))]

    return _call(
        lctx,
        ("max_pool2d", tuple(kernel), tuple(stride), tuple(map(tuple, pairs)), tuple(dilation)),
        [x],
        body,
        results=results,
    )


def _unary(stablehlo_op: str):
    """tanh, sqrt of a float tensor: one stablehlo op (jnp's form for a float input)."""

    def lower(original, lctx, x, **kwargs):
        if kwargs or not _plain(lctx, x) or not _float(x):
            return original(lctx, x, **kwargs)
        from litert_converter.mlir.dialects import stablehlo

        return _call(lctx, (stablehlo_op,), [x], lambda a: getattr(stablehlo, stablehlo_op)(a))

    return lower


def _slice_op(a, dim: int, start: int, stop: int, step: int):
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    shape = list(a.type.shape)
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[dim], limits[dim], strides[dim] = start, stop, step
    return stablehlo.slice(
        a, ir.DenseI64ArrayAttr.get(starts), ir.DenseI64ArrayAttr.get(limits), ir.DenseI64ArrayAttr.get(strides)
    )


def _slice(original, lctx, x, *args, **kwargs):
    """slice.Tensor (x, dim, start, end, step), static: a stablehlo.slice, nothing for a step-1
    slice of the whole axis (jnp's basic indexing, which the bridge takes for step 1; jax.lax.slice
    for a larger step, an op even where it keeps everything). An empty result goes to litert-torch."""
    import sys

    named = _named(args, kwargs, ("dim", "start", "end", "step"))
    if named is None:
        return original(lctx, x, *args, **kwargs)
    dim, start, end, step = (named.get(k, d) for k, d in (("dim", 0), ("start", None), ("end", None), ("step", 1)))
    if (
        not _plain(lctx, x)
        or not _static(x)
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
        return _call(lctx, ("identity",), [x], lambda a: a)
    return _call(lctx, ("slice", dim, first, stop, step), [x], lambda a: _slice_op(a, dim, first, stop, step))


def _select(original, lctx, x, dim, index, **kwargs):
    """select.int (x, dim, index): jax.lax.index_in_dim's form, a one-wide slice (always) then a
    reshape dropping the axis."""
    if kwargs or not _plain(lctx, x) or not _static(x) or not isinstance(dim, int) or not isinstance(index, int):
        return original(lctx, x, dim, index, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    shape = list(x.type.shape)
    axis = dim % len(shape)
    at = index + shape[axis] if index < 0 else index
    if not 0 <= at < shape[axis]:
        return original(lctx, x, dim, index, **kwargs)
    result = _result_type(lctx)
    return _call(
        lctx, ("select", axis, at), [x], lambda a: stablehlo.reshape(result, _slice_op(a, axis, at, at + 1, 1))
    )


def _split(original, lctx, x, split_sizes, dim=0, **kwargs):
    """split_with_sizes (x, sizes, dim): one step-1 slice per part, as jnp's basic indexing writes
    each (a part that is the whole axis: the input itself)."""
    results = _result_types(lctx) if lctx.node is not None else None
    sizes = split_sizes
    if (
        kwargs
        or results is None
        or not isinstance(dim, int)
        or not isinstance(sizes, (list, tuple))
        or not all(isinstance(n, int) and n > 0 for n in sizes)
        or len(results) != len(sizes)
        or not _static(x)
        or not all(_element_type(x) == t.element_type for t in results)
    ):
        return original(lctx, x, split_sizes, dim, **kwargs)
    shape = list(x.type.shape)
    axis = dim % len(shape)
    if sum(sizes) != shape[axis]:
        return original(lctx, x, split_sizes, dim, **kwargs)
    bounds = [(sum(sizes[:i]), sum(sizes[: i + 1])) for i in range(len(sizes))]

    def body(a):
        return [
            a if (start, stop) == (0, shape[axis]) else _slice_op(a, axis, start, stop, 1) for start, stop in bounds
        ]

    return _call(lctx, ("split", axis, tuple(sizes)), [x], body, results=results)


def _pad(original, lctx, x, pad, value=0, **kwargs):
    """constant_pad_nd (x, pad, value) with pads >= 0: one stablehlo.pad, the value a scalar
    constant of x's type (jax.lax.pad's form)."""
    if (
        kwargs
        or not _plain(lctx, x)
        or not _float(x)
        or not _static(x)
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
        fill = utils.splat(float(value), _element_type(a))
        return stablehlo.pad(
            a, fill, ir.DenseI64ArrayAttr.get(low), ir.DenseI64ArrayAttr.get(high), ir.DenseI64ArrayAttr.get([0] * rank)
        )

    return _call(lctx, ("pad", tuple(low), tuple(high), float(value)), [x], body)


def _ours() -> dict:
    import torch

    aten = torch.ops.aten
    return {
        aten.add.Tensor: _binary("add"),
        aten.sub.Tensor: _binary("subtract"),
        aten.mul.Tensor: _binary("multiply"),
        aten.div.Tensor: _binary("divide"),
        aten.add.Scalar: _binary("add"),
        aten.sub.Scalar: _binary("subtract"),
        aten.mul.Scalar: _binary("multiply"),
        aten.div.Scalar: _binary("divide"),
        aten.sigmoid.default: _sigmoid,
        aten.mm.default: _matmul,
        aten.bmm.default: _matmul,
        aten.unsqueeze.default: _new_shape("unsqueeze"),
        aten.squeeze.dims: _new_shape("reshape"),
        aten.squeeze.dim: _new_shape("reshape"),
        aten.expand.default: _new_shape("expand"),
        aten.permute.default: _permute,
        aten.clone.default: _clone,
        aten.view.default: _new_shape("reshape"),
        aten._unsafe_view.default: _new_shape("reshape"),
        aten.relu.default: _relu,
        aten.clamp.default: _clamp,
        aten.hardtanh.default: _hardtanh,
        aten.mean.dim: _mean,
        aten.mean.default: _mean,
        aten._softmax.default: _softmax,
        aten.max_pool2d_with_indices.default: _max_pool2d,
        aten.tanh.default: _unary("tanh"),
        aten.sqrt.default: _unary("sqrt"),
        aten.slice.Tensor: _slice,
        aten.select.int: _select,
        aten.split_with_sizes.default: _split,
        aten.constant_pad_nd.default: _pad,
    }


def direct_lowerings() -> contextlib.AbstractContextManager[None]:
    """Our lowerings in litert-torch's registry while the block runs, for its threads
    (litert_session() held; edge/litert/litert_torch_compat.py installs and undoes them)."""
    from tpuedge.edge.litert.litert_torch_compat import lowerings_replaced

    return lowerings_replaced(_ours())
