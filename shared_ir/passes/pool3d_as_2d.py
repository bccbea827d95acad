"""3-D pools (video: torchvision's S3D, R(2+1)D-style stems) as 2-D pools, one over each frame's
image and one over time.

    max_pool3d(x, (kt, kh, kw), (st, sh, sw), (pt, ph, pw), (dt, dh, dw), ceil)
        -> y = max_pool2d(x viewed (N, C*T, H, W), (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil)
           max_pool2d(y viewed (N, C, T, H'*W'), (kt, 1), (st, 1), (pt, 0), (dt, 1), ceil), viewed (N, C, T', H', W')
    avg_pool3d(x, ..., ceil, count_include_pad): the same with avg_pool2d (no divisor_override)

A box window's maximum is the maximum over time of each frame's window maxima, and its average
the average over time of theirs (with count_include_pad=False too: a window's valid elements are
its valid frames times each frame's valid pixels), each axis's output size computed on its own
as torch does. litert-torch lowered a 3-D pool to STABLEHLO_REDUCE_WINDOW, which
ai-edge-quantizer stopped on ("MAXIMUM not found in tensor_name_to_qsv": S3D's int8 build);
MAX_POOL_2D and AVERAGE_POOL_2D have int8 kernels in LiteRT and TFLite-Micro. The time pool is
left out where it is the identity (kt = st = 1, pt = 0). Dilated windows stay for LiteRT's own
forms (TFLite's 2-D pools have no dilation); so does a divisor_override.
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

__all__ = ["Pool3dAs2d"]


def _triple(value, default) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    values = values or list(default)
    return [int(v) for v in (values * 3 if len(values) == 1 else values)]


class Pool3dAs2d:
    name = "pool3d-as-2d"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x = node.args[0]
            if not static_shapes(x) or x.meta["val"].dim() != 5:
                return None
            given = call_arguments(node)
            kernel = _triple(given["kernel_size"], ())
            stride = _triple(given["stride"], kernel)
            padding = _triple(given["padding"], (0,))
            maximum = node.target == aten.max_pool3d.default
            if (maximum and _triple(given["dilation"], (1,)) != [1, 1, 1]) or (
                not maximum and given.get("divisor_override") is not None
            ):
                return None
            ceil = bool(given["ceil_mode"])

            def pool(value, k, s, p):
                if maximum:
                    return call_with_val(graph, aten.max_pool2d.default, value, k, s, p, [1, 1], ceil)
                return call_with_val(
                    graph, aten.avg_pool2d.default, value, k, s, p, ceil, bool(given["count_include_pad"])
                )

            n, c, t, h, w = x.meta["val"].shape
            frames = call_with_val(graph, aten.reshape.default, x, [n, c * t, h, w])
            per_frame = pool(frames, kernel[1:], stride[1:], padding[1:])
            h2, w2 = per_frame.meta["val"].shape[-2:]
            if kernel[0] == stride[0] == 1 and padding[0] == 0:
                return call_with_val(graph, aten.reshape.default, per_frame, [n, c, t, h2, w2])
            over_time = pool(
                call_with_val(graph, aten.reshape.default, per_frame, [n, c, t, h2 * w2]),
                [kernel[0], 1],
                [stride[0], 1],
                [padding[0], 0],
            )
            return call_with_val(graph, aten.reshape.default, over_time, [n, c, over_time.meta["val"].shape[2], h2, w2])

        found = call_functions(exported_program, {aten.max_pool3d.default, aten.avg_pool3d.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no 3-D pool",
            changed="wrote {count} 3-D pool(s) as 2-D pools over frames and over time",
        )
