"""StableHLO for the commonest plain ops, emitted directly instead of through litert-torch's jax bridge.

litert-torch lowers float add/sub/mul/div, relu, clamp, sigmoid, permute, view, squeeze,
unsqueeze, expand, clone, mm and bmm through its jax bridge: every distinct (op, shapes, arguments)
is a `jax.jit(...).lower()`, a StableHLO -> VHLO serialization, a parse and an inlining, about
8 ms each. A CNN has hundreds of distinct ones (MobileNetV3-small: 246, about 2 s of its 4 s MLIR
lowering). These lowerings emit what the bridge's jax functions lower to, in the bridge's form (a
private function per distinct computation, called where the op was; jax's broadcast steps and
constants), in microseconds; the converter then writes the same flatbuffer, byte for byte
(tests/test_direct_lowerings.py compares them).

Only the plain case is taken here: operands of the result's element type (and, for float32
arithmetic, integer ones converted as jax converts them), no extra arguments (alpha, rounding
modes, memory formats other than the default). Anything else goes to the lowering litert-torch
registered, unchanged. `direct_lowerings()` installs them for the length
of one lowering (counted, under a lock, so concurrent builds share one installation) and then puts
litert-torch's own back: a user's `litert_torch.convert` in this process is left as it was.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["direct_lowerings"]

_LOCK = threading.Lock()
_users = 0
_saved: dict = {}  # op -> litert-torch's own lowering, while ours are installed
_plugin_class = None  # the context plugin class, made once litert-torch is imported
_next_id = 0  # private function names, unique in a process (inlined away: never in a file)


def _element_type(value):
    return value.type.element_type


def _result_type(lctx):
    """The node's one static-shaped result type, else None (and the op goes to litert-torch, which
    copes with what this does not: no tensor meta, several results, dynamic sizes)."""
    from litert_torch.backend.lowerings import utils

    try:
        types = utils.node_meta_to_ir_types(lctx.node)
    except (RuntimeError, TypeError, ValueError, KeyError):
        return None
    return types[0] if len(types) == 1 and types[0].has_static_shape else None


def _plain(lctx, *values) -> bool:
    """Tensors (MLIR values) of one element type, and the node's one result of that type too."""
    from litert_converter.mlir import ir

    if lctx.node is None or not all(isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType) for v in values):
        return False
    result = _result_type(lctx)
    return result is not None and all(_element_type(v) == result.element_type for v in values)


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


def _call(lctx, key: tuple, operands: list, body):
    """`body(*arguments)`'s ops in a private function, called from here, as the jax bridge leaves
    them: one function per distinct computation (`key`, with the operand types), its ops without a
    location. The converter inlines calls late; when it inlines, and what it can merge then,
    decide which ops it fuses and the names it gives them, so this form gets the bridge's file."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import func

    global _next_id
    result = _result_type(lctx)
    key = (*key, tuple(str(v.type) for v in operands), str(result))
    functions = _functions(lctx)
    function = functions.get(key)
    if function is None:
        with ir.InsertionPoint.at_block_begin(lctx.ir_module.body), ir.Location.unknown():
            with _LOCK:
                _next_id += 1
                name = f"tpuedge_direct_{_next_id}"
            function = func.FuncOp(name, ir.FunctionType.get([v.type for v in operands], [result]), visibility="private")
            block = function.add_entry_block()
            with ir.InsertionPoint(block):
                func.ReturnOp([body(*block.arguments)])
        functions[key] = function
    return func.CallOp(function, operands).results[0]


def _broadcast(value, shape: list[int]):
    """`value` broadcast to `shape` as numpy does (trailing dimensions aligned), in jax's steps: a
    lower rank first gains leading ones, then the sizes grow (the converter fuses a bias add that
    comes in these steps as it does the bridge's)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    def step(v, to: list[int], dims: list[int]):
        return stablehlo.broadcast_in_dim(ir.RankedTensorType.get(to, _element_type(v)), v, ir.DenseI64ArrayAttr.get(dims))

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
        if (kwargs or result is None or not isinstance(result.element_type, ir.F32Type)
                or not all(isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType) for v in tensors)
                or not all(_element_type(v) == result.element_type or _is_int(v) for v in tensors)):
            return original(lctx, self, other, **kwargs)
        shape = list(result.shape)

        def body(*arguments):
            promoted = [a if _element_type(a) == result.element_type  # .astype(float32): an integer converted
                        else stablehlo.convert(ir.RankedTensorType.get(a.type.shape, result.element_type), a)
                        for a in arguments]
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
    if (kwargs or not _plain(lctx, x, y) or not _float(x) or len(x.type.shape) != len(y.type.shape)
            or 1 in list(x.type.shape)[:-2] or 1 in list(y.type.shape)[:-2]):
        return original(lctx, x, y, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    rank = len(x.type.shape)
    batch = list(range(rank - 2))
    numbers = stablehlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=batch, rhs_batching_dimensions=batch,
        lhs_contracting_dimensions=[rank - 1], rhs_contracting_dimensions=[rank - 2],
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
    if (kwargs or not bounds or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
            or not _plain(lctx, x) or not _float(x)):
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
    }


def _bound(ours, original):
    def lower(lctx, *args, **kwargs):
        return ours(original, lctx, *args, **kwargs)

    return lower


@contextlib.contextmanager
def direct_lowerings() -> Iterator[None]:
    """Our lowerings in litert-torch's registry while the block runs (litert_session() held)."""
    global _users
    from litert_torch.backend.lowerings import registry

    ops = registry.global_registry.registered_ops
    with _LOCK:
        if _users == 0:
            for op, ours in _ours().items():
                original = ops.get(op)
                if original is not None:  # an op this litert-torch doesn't lower stays without one
                    _saved[op] = original
                    ops[op] = _bound(ours, original)
        _users += 1
    try:
        yield
    finally:
        with _LOCK:
            _users -= 1
            if _users == 0:
                ops.update(_saved)
                _saved.clear()
