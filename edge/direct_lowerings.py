"""StableHLO for the commonest plain ops, emitted directly instead of through litert-torch's jax bridge.

litert-torch lowers permute, clone, view, relu, clamp and tensor add/sub/mul/div through its jax
bridge: every distinct (op, shapes, arguments) is a `jax.jit(...).lower()`, a StableHLO -> VHLO
serialization, a parse and an inlining, about 8 ms each. A CNN has hundreds of distinct ones
(MobileNetV3-small: 246, about 2 s of its 4 s MLIR lowering). These lowerings emit the ops the
bridge's jax functions lower to, in the same order, in microseconds; the converter then writes the
same flatbuffer (tests/test_direct_lowerings.py compares the bytes).

Only the plain case is taken here: operands of one element type, a result of that type, no extra
arguments (alpha, rounding modes, memory formats other than the default). Anything else goes to
the lowering litert-torch registered, unchanged. `direct_lowerings()` installs them for the length
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
    from litert_torch.backend.lowerings import utils

    types = utils.node_meta_to_ir_types(lctx.node)
    return types[0] if len(types) == 1 else None


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


def _binary(stablehlo_op: str):
    def lower(original, lctx, self, other, **kwargs):
        # float only: jax's integer multiply runs int64 at 32 bits, a form of its own
        if kwargs or not _plain(lctx, self, other) or not _float(self):
            return original(lctx, self, other, **kwargs)
        from litert_converter.mlir.dialects import stablehlo

        shape = list(_result_type(lctx).shape)
        return _call(lctx, (stablehlo_op,), [self, other], lambda a, b: getattr(stablehlo, stablehlo_op)(_broadcast(a, shape), _broadcast(b, shape)))

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


def _view(original, lctx, x, shape, **kwargs):
    if kwargs or not _plain(lctx, x):
        return original(lctx, x, shape, **kwargs)
    from litert_converter.mlir.dialects import stablehlo

    result = _result_type(lctx)
    if list(result.shape) == list(x.type.shape):
        return _call(lctx, ("identity",), [x], lambda a: a)  # jax's reshape to the same shape emits nothing
    return _call(lctx, ("reshape",), [x], lambda a: stablehlo.reshape(result, a))


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
        aten.permute.default: _permute,
        aten.clone.default: _clone,
        aten.view.default: _view,
        aten._unsafe_view.default: _view,
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
