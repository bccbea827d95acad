"""How a direct lowering (edge/litert/direct_lowerings.py) emits StableHLO in the form litert-torch's
jax bridge leaves: each distinct computation a private function, called where the op was
(`call`), with jax's broadcast steps, constants and reductions; and the checks that pick the
plain cases taken (static shapes, one element type).
"""

from __future__ import annotations

import threading

__all__ = [
    "element_type",
    "result_types",
    "result_type",
    "is_plain",
    "is_static",
    "call",
    "broadcast",
    "is_float",
    "splat_like",
    "is_int",
    "reduce_over",
    "combined_by",
    "keep_dims",
    "named_arguments",
    "axes_of",
    "pair_of",
    "slice_op",
]

_ID_LOCK = threading.Lock()
_plugin_class = None  # the context plugin class, made once litert-torch is imported
_next_id = 0  # private function names, unique in a process (inlined away: never in a file)


def element_type(value):
    return value.type.element_type


def result_types(lctx) -> list | None:
    """The node's static-shaped result types, else None (and the op goes to litert-torch, which
    copes with what this does not: no tensor meta, dynamic sizes)."""
    from litert_torch.backend.lowerings import utils

    try:
        types = utils.node_meta_to_ir_types(lctx.node)
    except (RuntimeError, TypeError, ValueError, KeyError):
        return None
    return list(types) if types and all(t.has_static_shape for t in types) else None


def result_type(lctx):
    """The node's one static-shaped result type, else None (several results too)."""
    types = result_types(lctx)
    return types[0] if types is not None and len(types) == 1 else None


def is_plain(lctx, *values) -> bool:
    """Tensors (MLIR values) of one element type, and the node's one result of that type too."""
    from litert_converter.mlir import ir

    if lctx.node is None or not all(
        isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType) for v in values
    ):
        return False
    result = result_type(lctx)
    return result is not None and all(element_type(v) == result.element_type for v in values)


def is_static(x) -> bool:
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


def call(lctx, key: tuple, operands: list, body, results: list | None = None):
    """`body(*arguments)`'s ops in a private function, called from here, as the jax bridge leaves
    them: one function per distinct computation (`key`, with the operand types), its ops without a
    location. The converter inlines calls late; when it inlines, and what it can merge then,
    decide which ops it fuses and the names it gives them, so this form gets the bridge's file.
    `results`: the types of a node with several results (body returns a list; so does this)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import func

    global _next_id
    types = results or [result_type(lctx)]
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


def broadcast(value, shape: list[int]):
    """`value` broadcast to `shape` as numpy does (trailing dimensions aligned), in jax's steps: a
    lower rank first gains leading ones, then the sizes grow (the converter fuses a bias add that
    comes in these steps as it does the bridge's)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    def step(v, to: list[int], dims: list[int]):
        return stablehlo.broadcast_in_dim(
            ir.RankedTensorType.get(to, element_type(v)), v, ir.DenseI64ArrayAttr.get(dims)
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


def is_float(value) -> bool:
    from litert_converter.mlir import ir

    return isinstance(element_type(value), ir.FloatType)


def splat_like(x, value):
    """A scalar constant of x's element type broadcast to x's shape (jax: constant, broadcast_in_dim)."""
    from litert_torch.backend.lowerings import utils

    return broadcast(utils.splat(value, element_type(x)), list(x.type.shape))


def is_int(value) -> bool:
    from litert_converter.mlir import ir

    element = element_type(value)
    return isinstance(element, ir.IntegerType) and element.width > 1


def reduce_over(x, dims: list[int], init: float, combine: str):
    """x reduced over `dims` (in the order given, as jax keeps them) by stablehlo's `combine`
    ("add", "maximum") from the scalar `init`: jnp.sum's and jnp.max's form."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo
    from litert_torch.backend.lowerings import utils

    element = element_type(x)
    kept = [size for axis, size in enumerate(x.type.shape) if axis not in dims]
    op = stablehlo.ReduceOp(
        [ir.RankedTensorType.get(kept, element)], [x], [utils.splat(init, element)], ir.DenseI64ArrayAttr.get(dims)
    )
    return combined_by(op, combine, element)


def combined_by(op, combine: str, element):
    """A reduce or reduce_window `op` given its body: stablehlo's `combine` of two scalars of
    `element`; its one result."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    scalar = ir.RankedTensorType.get([], element)
    block = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        stablehlo.return_([getattr(stablehlo, combine)(*block.arguments)])
    return op.result


def keep_dims(reduced, shape: list[int], dims: list[int]):
    """A reduction given back its reduced axes as ones (jax's keepdims: one broadcast_in_dim)."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    kept = [axis for axis in range(len(shape)) if axis not in dims]
    ones = [1 if axis in dims else size for axis, size in enumerate(shape)]
    return stablehlo.broadcast_in_dim(
        ir.RankedTensorType.get(ones, element_type(reduced)), reduced, ir.DenseI64ArrayAttr.get(kept)
    )


def named_arguments(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict | None:
    """An aten op's arguments after the tensor, by name (positional ones in `names`' order); None
    where there are more, or others, than `names` (the op then goes to litert-torch)."""
    named = dict(zip(names, args), **kwargs)
    return named if len(args) <= len(names) and set(named) <= set(names) else None


def axes_of(dims, rank: int) -> list[int] | None:
    """aten's dim list as jax canonicalizes it (each non-negative, order kept), None where the
    bridge's own form is not this one (no list, an empty one, a repeat)."""
    if not isinstance(dims, (list, tuple)) or not dims or not all(isinstance(d, int) for d in dims):
        return None
    axes = [d % rank for d in dims]
    return axes if len(set(axes)) == len(axes) else None


def pair_of(value, default: list[int] | None = None) -> list[int] | None:
    """An int or a 2-list of ints (max_pool2d's arguments) as a 2-list; `default` for []."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, value]
    if isinstance(value, (list, tuple)) and not value and default is not None:
        return list(default)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def slice_op(a, dim: int, start: int, stop: int, step: int):
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    shape = list(a.type.shape)
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[dim], limits[dim], strides[dim] = start, stop, step
    return stablehlo.slice(
        a, ir.DenseI64ArrayAttr.get(starts), ir.DenseI64ArrayAttr.get(limits), ir.DenseI64ArrayAttr.get(strides)
    )
