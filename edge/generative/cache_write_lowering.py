"""litert-torch's lowering of `tpuedge.cache_write` (shared_ir/generative/cache_ops.py): StableHLO's
dynamic_update_slice at input_pos[0] along the op's dim, which the converter writes as LiteRT's
DYNAMIC_UPDATE_SLICE. Registered through litert-torch's public `lowerings.lower` decorator, for
tpuedge's own op only, once per process; the android capability reads it from the same registry."""

from __future__ import annotations

import threading

__all__ = ["register_cache_write_lowering"]

_LOCK = threading.Lock()
_registered = False


def register_cache_write_lowering() -> None:
    """Call inside `litert_session()` (litert-torch imported)."""
    global _registered
    with _LOCK:
        if _registered:
            return
        from litert_converter.mlir import ir
        from litert_converter.mlir.dialects import stablehlo
        from litert_torch.backend.lowerings import lower, utils

        from tpuedge.shared_ir.generative.cache_ops import CACHE_WRITE

        @lower(CACHE_WRITE)
        def _cache_write(lctx, cache, update, input_pos, dim: int):
            i32 = ir.IntegerType.get_signless(32)
            first = stablehlo.slice(
                input_pos, ir.DenseI64ArrayAttr.get([0]), ir.DenseI64ArrayAttr.get([1]), ir.DenseI64ArrayAttr.get([1])
            )
            start = stablehlo.reshape(ir.RankedTensorType.get([], first.type.element_type), first)
            if first.type.element_type != i32:
                start = stablehlo.convert(ir.RankedTensorType.get([], i32), start)
            rank = len(cache.type.shape)
            dim = dim % rank
            indices = [start if d == dim else utils.splat(0, i32) for d in range(rank)]
            return stablehlo.dynamic_update_slice(cache, update, indices)

        _registered = True
