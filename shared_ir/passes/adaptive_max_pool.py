"""An adaptive max pool whose input divides evenly into its output as a plain max pool.

    adaptive_max_pool2d(x, (oh, ow)) -> max_pool2d(x, (H/oh, W/ow), stride = the same)
    adaptive_max_pool1d(x, o)        -> reshape (N, C, o, L/o) and amax over the last dim

litert-torch has no lowering for `aten.adaptive_max_pool2d` / `adaptive_max_pool1d`, so timm's
"max" and "avgmax" global pools and a text CNN's max-over-time `nn.AdaptiveMaxPool1d(1)` stopped
every android and mcu build at `check` (tests/test_passes_adaptive_max_pool.py). When each output
cell covers an equal, non-overlapping window the two are the same computation (MAX_POOL_2D; the
1-D form's max is a REDUCE_MAX, which mcu's `reduce-max-as-maximum` then writes as MAXIMUMs).
A pool whose indices are read, or whose windows are uneven (torch's adaptive windows overlap
then), is left for the check to report. Exact.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls, static_shapes

__all__ = ["AdaptiveMaxPoolAsPool"]


class AdaptiveMaxPoolAsPool:
    name = "adaptive-max-pool-as-pool"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, size = node.args[0], [int(s) for s in node.args[1]]
            if not static_shapes(x):
                return None
            if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in node.users):
                return None  # its indices are read
            spatial = list(x.meta["val"].shape[-len(size) :])
            if any(o <= 0 or n % o for n, o in zip(spatial, size)):
                return None  # uneven windows
            for unread in [u for u in node.users if u.args[1] != 0]:
                graph.erase_node(unread)
            window = [n // o for n, o in zip(spatial, size)]
            if node.target == aten.adaptive_max_pool2d.default:
                return call_with_val(graph, aten.max_pool2d.default, x, window, window), None
            shape = list(x.meta["val"].shape)
            grouped = call_with_val(graph, aten.reshape.default, x, shape[:-1] + [size[0], window[0]])
            return call_with_val(graph, aten.amax.default, grouped, [-1]), None

        found = call_functions(exported_program, {aten.adaptive_max_pool2d.default, aten.adaptive_max_pool1d.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no adaptive max pool with even windows",
            changed="wrote {count} adaptive max pool(s) as plain max pools",
        )
