"""1-D pools as the 2-D pools TFLite-Micro has, on a (N, C, 1, L) view.

    avg_pool1d(x, k, s, p, ceil, count_include_pad) -> avg_pool2d(x[:, :, None], (1, k), (1, s), (0, p), ...)[:, :, 0]
    max_pool1d(x, k, s, p, d, ceil)                 -> max_pool2d(x[:, :, None], (1, k), (1, s), (0, p), (1, d), ceil)[:, :, 0]
    adaptive_avg_pool1d(x, o), L divisible by o     -> mean of reshape (N, C, o, L / o) over its last dim

Audio and sequence encoders pool over time in 1-D (HF SEW's squeeze, FocalNet's head, a text
CNN's pooling); TFLite-Micro's check has entries for the 2-D pools only, so mcu refused them
(tests/test_passes_pool1d.py). The same windows over a height-1 image: AVERAGE_POOL_2D,
MAX_POOL_2D, MEAN and RESHAPEs, all int8. Exact. Uneven adaptive windows and dilated max pools
(TFLite's MAX_POOL_2D has no dilation) stay for the check.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    rewritten_calls,
    static_shapes,
)

__all__ = ["Pool1dAs2d"]


def _one(value) -> int | None:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return int(values[0]) if values else None


class Pool1dAs2d:
    name = "pool1d-as-2d"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x = node.args[0]
            if not static_shapes(x) or x.meta["val"].dim() != 3:
                return None
            if node.target == aten.adaptive_avg_pool1d.default:
                length, out = x.meta["val"].shape[-1], _one(node.args[1])
                if not out or length % out:
                    return None
                grouped = call_with_val(
                    graph, aten.reshape.default, x, list(x.meta["val"].shape[:-1]) + [out, length // out]
                )
                return call_with_val(graph, aten.mean.dim, grouped, [-1])
            given = call_arguments(node)
            kernel = _one(given["kernel_size"])
            stride = _one(given["stride"]) or kernel
            padding = _one(given["padding"])
            if _one(given.get("dilation", 1)) != 1:
                return None  # TFLite's MAX_POOL_2D has no dilation
            image = call_with_val(graph, aten.unsqueeze.default, x, 2)
            if node.target == aten.avg_pool1d.default:
                pooled = call_with_val(
                    graph,
                    aten.avg_pool2d.default,
                    image,
                    [1, kernel],
                    [1, stride],
                    [0, padding],
                    bool(given["ceil_mode"]),
                    bool(given["count_include_pad"]),
                )
            else:
                pooled = call_with_val(
                    graph,
                    aten.max_pool2d.default,
                    image,
                    [1, kernel],
                    [1, stride],
                    [0, padding],
                    [1, 1],
                    bool(given["ceil_mode"]),
                )
            return call_with_val(graph, aten.squeeze.dim, pooled, 2)

        found = call_functions(
            exported_program, {aten.avg_pool1d.default, aten.max_pool1d.default, aten.adaptive_avg_pool1d.default}
        )
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no 1-D pool",
            changed="wrote {count} 1-D pool(s) as 2-D pools over a height-1 view",
        )
