"""`F.unfold` (im2col: every k x k patch as a column) as a depthwise convolution with one-hot taps.

    im2col(x, k, dilation, padding, stride)[n, c*kh*kw + i*kw + j, l]
        = x_padded[n, c, row(l)*stride + i*dilation, col(l)*stride + j*dilation]
        = conv2d(x, taps, stride, padding, dilation, groups=C) reshaped to (N, C*kh*kw, L)
    taps[c*kh*kw + i*kw + j, 0, i, j] = 1, every other tap 0

TFLite-Micro has no im2col; timm's TNT unfolds its image into pixel patches with it and VOLO its
feature map, and the mcu check refused both on it. The convolution (DEPTHWISE_CONV_2D, a depth
multiplier of kh*kw) copies values: exact in float, and in int8, where each tap is 1 (127 at a
1/127 per-channel scale) and output and input share a range.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls, static_shapes

__all__ = ["Im2colAsConv"]


def _rewrite(program, graph, node) -> Any:
    import torch

    aten = torch.ops.aten
    x, kernel, dilation, padding, stride = node.args[:5]
    val = x.meta["val"]
    if val.dim() != 4 or not val.dtype.is_floating_point or not static_shapes(x, node):
        return None  # an unbatched (3-D) unfold is left for the check to report
    channels, (kh, kw) = val.shape[1], kernel
    taps = torch.zeros(channels * kh * kw, 1, kh, kw, dtype=val.dtype)
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                taps[(c * kh + i) * kw + j, 0, i, j] = 1.0
    weight = lift_constant(program, f"_{node.name}_taps", taps, x)
    patches = call_with_val(
        graph, aten.conv2d.default, x, weight, None, list(stride), list(padding), list(dilation), channels
    )
    return call_with_val(graph, aten.reshape.default, patches, [val.shape[0], channels * kh * kw, -1])


class Im2colAsConv:
    name = "im2col-as-conv"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        found = call_functions(exported_program, {torch.ops.aten.im2col.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            _rewrite,
            with_program=True,
            unchanged="no F.unfold (im2col) in the program",
            changed="wrote {count} F.unfold(s) as depthwise convolutions with one-hot taps",
        )
