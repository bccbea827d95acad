"""Direct StableHLO lowerings (edge/litert/direct_lowerings.py) of arithmetic, activations,
matrix products, means, softmax and max pooling, each in the form the bridge's jax function
lowers to, and each handing anything but its plain case to litert-torch's own lowering.
"""

from __future__ import annotations

from tpuedge.edge.litert.direct_emit import (
    axes_of,
    broadcast,
    call,
    combined_by,
    element_type,
    is_float,
    is_int,
    is_plain,
    is_static,
    keep_dims,
    named_arguments,
    pair_of,
    reduce_over,
    result_type,
    result_types,
    splat_like,
)

__all__ = ["arithmetic_lowerings"]


def _binary(stablehlo_op: str):
    """aten's add/sub/mul/div, .Tensor (`other` a tensor, or a number litert-torch made a 0-d
    tensor: int32 for an int) and .Scalar (`other` a Python number): float32 results only, the one
    promotion the bridge's jax lowering does simply (a float64 promotion comes back to float32)."""

    def lower(original, lctx, self, other, **kwargs):
        from litert_converter.mlir import ir
        from litert_converter.mlir.dialects import stablehlo
        from litert_torch.backend.lowerings import utils

        result = result_type(lctx) if lctx.node is not None else None
        number = isinstance(other, (int, float)) and not isinstance(other, bool)
        tensors = [self] if number else [self, other]
        if (
            kwargs
            or result is None
            or not isinstance(result.element_type, ir.F32Type)
            or not all(isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType) for v in tensors)
            or not all(element_type(v) == result.element_type or is_int(v) for v in tensors)
        ):
            return original(lctx, self, other, **kwargs)
        shape = list(result.shape)

        def body(*arguments):
            promoted = [
                a
                if element_type(a) == result.element_type  # .astype(float32): an integer converted
                else stablehlo.convert(ir.RankedTensorType.get(a.type.shape, result.element_type), a)
                for a in arguments
            ]
            if number:  # jnp.array(other, dtype=float32): a constant
                promoted.append(utils.splat(float(other), result.element_type))
            a, b = promoted
            return getattr(stablehlo, stablehlo_op)(broadcast(a, shape), broadcast(b, shape))

        return call(lctx, (stablehlo_op, other if number else None), tensors, body)

    return lower


def _sigmoid(original, lctx, x, **kwargs):
    from litert_converter.mlir import ir

    if kwargs or not is_plain(lctx, x) or not isinstance(element_type(x), ir.F32Type):
        return original(lctx, x, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    def body(a):  # jax.nn.sigmoid's form: 1 / (1 + exp(-a))
        exp = stablehlo.exponential(stablehlo.negate(a))
        total = stablehlo.add(splat_like(a, 1.0), exp)
        return stablehlo.divide(splat_like(a, 1.0), total)

    return call(lctx, ("sigmoid",), [x], body)


def _matmul(original, lctx, x, y, **kwargs):
    """mm and bmm (`x @ y`): one dot_general, as the bridge's jax writes it. A batch of one goes to
    litert-torch: jax writes that as reshapes around a 2-D product."""
    if (
        kwargs
        or not is_plain(lctx, x, y)
        or not is_float(x)
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
    result = result_type(lctx)
    return call(lctx, ("dot",), [x, y], lambda a, b: stablehlo.dot_general(result, a, b, numbers))


def _relu(original, lctx, x, **kwargs):
    if kwargs or not is_plain(lctx, x) or not is_float(x):
        return original(lctx, x, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    return call(lctx, ("relu",), [x], lambda a: stablehlo.maximum(a, splat_like(a, 0.0)))


def _clamp(original, lctx, x, min=None, max=None, **kwargs):  # noqa: A002 - aten's argument names
    bounds = [b for b in (min, max) if b is not None]
    if (
        kwargs
        or not bounds
        or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        or not is_plain(lctx, x)
        or not is_float(x)
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
                converted = stablehlo.convert(ir.RankedTensorType.get([], element_type(a)), bound)
                a = op(broadcast(converted, list(a.type.shape)), a)
        return a

    return call(lctx, ("clamp", min, max), [x], clip)


def _hardtanh(original, lctx, x, min_val=-1, max_val=1, **kwargs):
    """hardtanh (x, min_val, max_val; relu6 is one): torchax writes it as jnp.clip, clamp's form."""

    def theirs(lctx, x, low, high, **rest):
        return original(lctx, x, min_val, max_val, **rest)

    return _clamp(theirs, lctx, x, min_val, max_val, **kwargs)


def _unary(stablehlo_op: str):
    """tanh, sqrt of a float tensor: one stablehlo op (jnp's form for a float input)."""

    def lower(original, lctx, x, **kwargs):
        if kwargs or not is_plain(lctx, x) or not is_float(x):
            return original(lctx, x, **kwargs)
        from litert_converter.mlir.dialects import stablehlo

        return call(lctx, (stablehlo_op,), [x], lambda a: getattr(stablehlo, stablehlo_op)(a))

    return lower


def _mean(original, lctx, x, *args, **kwargs):
    """mean.dim (x, dims, keepdim) and mean (x): jnp.mean's form, a sum divided by the count.
    A dtype argument, a 0-d input or an empty dim list go to litert-torch."""
    named = named_arguments(args, kwargs, ("dim", "keepdim", "dtype"))
    if named is None:
        return original(lctx, x, *args, **kwargs)
    dims, keepdim = named.get("dim"), named.get("keepdim", False)
    rank = len(x.type.shape) if is_plain(lctx, x) and is_static(x) else 0
    axes = (list(range(rank)) if dims is None else axes_of(dims, rank)) if rank else None
    if named.get("dtype") is not None or axes is None or not isinstance(keepdim, bool) or not is_float(x):
        return original(lctx, x, *args, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    shape = list(x.type.shape)
    count = 1
    for axis in axes:
        count *= shape[axis]

    def body(a):
        total = reduce_over(a, axes, 0.0, "add")
        if keepdim:
            total = keep_dims(total, shape, axes)
        return stablehlo.divide(total, splat_like(total, float(count)))

    return call(lctx, ("mean", tuple(axes), keepdim), [x], body)


def _softmax(original, lctx, x, dim, half_to_float, **kwargs):
    """_softmax (x, dim, half_to_float=False): jax.nn.softmax's form, the maximum (from -inf) taken
    off before exp, then divided by the sum."""
    if (
        kwargs
        or half_to_float
        or not is_plain(lctx, x)
        or not is_float(x)
        or not is_static(x)
        or not isinstance(dim, int)
    ):
        return original(lctx, x, dim, half_to_float, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    shape = list(x.type.shape)
    axes = [dim % len(shape)]

    def spread(reduced):  # keepdims, then broadcast back to x's shape (a step only where it grows)
        return broadcast(keep_dims(reduced, shape, axes), shape)

    def body(a):
        top = reduce_over(a, axes, float("-inf"), "maximum")
        top = stablehlo.maximum(splat_like(top, float("-inf")), top)
        exp = stablehlo.exponential(stablehlo.subtract(a, spread(top)))
        return stablehlo.divide(exp, spread(reduce_over(exp, axes, 0.0, "add")))

    return call(lctx, ("softmax", axes[0]), [x], body)


def _max_pool2d(original, lctx, x, kernel_size, *args, **kwargs):
    """max_pool2d_with_indices of a 4-D float32 input: the bridge's form, one reduce_window from
    -inf (its padding as litert-torch works it out, ceil mode included) and indices of zeros (the
    bridge's too: TFLite's reduce_window has one output; a graph that reads them goes wrong either
    way, and litert-torch's table keeps max_pool2d without indices)."""
    from litert_converter.mlir import ir

    named = named_arguments(args, kwargs, ("stride", "padding", "dilation", "ceil_mode"))
    if named is None:
        return original(lctx, x, kernel_size, *args, **kwargs)
    kernel = pair_of(kernel_size)
    stride = pair_of(named.get("stride", []), default=kernel)
    padding, dilation = pair_of(named.get("padding", 0)), pair_of(named.get("dilation", 1))
    ceil_mode = named.get("ceil_mode", False)
    results = result_types(lctx) if lctx.node is not None else None
    if (
        None in (kernel, stride, padding, dilation)
        or not isinstance(ceil_mode, bool)
        or results is None
        or len(results) != 2
        or not is_static(x)
        or len(x.type.shape) != 4
        or not isinstance(element_type(x), ir.F32Type)
        or results[0].element_type != element_type(x)
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
            [utils.splat(float("-inf"), element_type(a))],
            [1, 1, *kernel],
            window_strides=[1, 1, *stride],
            base_dilations=[1, 1, 1, 1],
            window_dilations=[1, 1, *dilation],
            padding=ir.DenseIntElementsAttr.get(np.asarray(pairs, np.int64)),
        )
        pooled = combined_by(op, "maximum", element_type(a))
        zero = utils.splat(0, results[1].element_type)
        return [pooled, stablehlo.broadcast_in_dim(results[1], zero, ir.DenseI64ArrayAttr.get([]))]

    return call(
        lctx,
        ("max_pool2d", tuple(kernel), tuple(stride), tuple(map(tuple, pairs)), tuple(dilation)),
        [x],
        body,
        results=results,
    )


def arithmetic_lowerings() -> dict:
    """aten overload -> its direct lowering, for litert-torch's registry (edge/litert/direct_lowerings.py)."""
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
        aten.relu.default: _relu,
        aten.clamp.default: _clamp,
        aten.hardtanh.default: _hardtanh,
        aten.mean.dim: _mean,
        aten.mean.default: _mean,
        aten._softmax.default: _softmax,
        aten.max_pool2d_with_indices.default: _max_pool2d,
        aten.tanh.default: _unary("tanh"),
        aten.sqrt.default: _unary("sqrt"),
    }
