"""`F.fold` (col2im: overlapping patches summed back into an image) as a sum of placed taps.

    col2im(cols, (H, W), k, dilation d, padding p, stride s)[n, c, y, x]
        = sum over taps (i, j) and patches (u, v) with u*s + i*d - p = y, v*s + j*d - p = x
          of cols[n, (c*kh + i)*kw + j, u*Lw + v]

Each tap's (Lh, Lw) values land on a stride-s grid offset by (i*d, j*d) in the padded image:
spread with zeros between them (a 5-D reshape and a PAD), shifted into place (PAD, or a slice
where they overhang), summed over the kh*kw taps (ADD) and cropped by the padding. TFLite-Micro
has no col2im; VOLO's outlooker folds its attention-weighted patches back with it, and the mcu
check refused VOLO on it. Exact in float to the order of the sums; the int8 sum of kh*kw terms
carries their rounding.

Patches that tile the image (stride = kernel, no padding or dilation: HF MobileViTV2 folds its
attention's patches back so) need no sums: the fold is a rearrangement of the columns,

    cols (N, C*kh*kw, Lh*Lw) -> (N, C, kh, kw, Lh, Lw) -> permute (0, 1, 4, 2, 5, 3) -> (N, C, H, W)

exact in int8 too. Android runs this pass as well: litert-torch lowered col2im to a
STABLEHLO_SCATTER whose update LiteRT refused to prepare.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls, static_shapes

__all__ = ["Col2imAsSums"]

MAX_TAPS = 49  # kh * kw: beyond a 7x7 kernel the ADD chain grows long; left for the check


def _placed(
    graph, aten, tap, count: tuple[int, int], stride: tuple[int, int], offset: tuple[int, int], canvas: tuple[int, int]
):
    """`tap` (M, Lh, Lw) on a (M, Hp, Wp) canvas of zeros at rows offset + u*stride, columns likewise."""
    (lh, lw), (sh, sw), (oh, ow), (hp, wp) = count, stride, offset, canvas
    x = tap
    if sh > 1 or sw > 1:  # zeros between the values: (M, Lh, 1, Lw, 1) padded to (M, Lh, sh, Lw, sw)
        x = call_with_val(graph, aten.reshape.default, x, [-1, lh, 1, lw, 1])
        x = call_with_val(graph, aten.constant_pad_nd.default, x, [0, sw - 1, 0, 0, 0, sh - 1], 0.0)
        x = call_with_val(graph, aten.reshape.default, x, [-1, lh * sh, lw * sw])
    for dim, (offset_, size, total) in ((1, (oh, lh * sh, hp)), (2, (ow, lw * sw, wp))):
        after = total - offset_ - size
        if after < 0:  # the zeros after the last value overhang the canvas: cut them
            x = call_with_val(graph, aten.slice.Tensor, x, dim, 0, size + after)
            after = 0
        if offset_ or after:
            pads = [0, 0, 0, 0]
            pads[(2 - dim) * 2 : (2 - dim) * 2 + 2] = [offset_, after]
            x = call_with_val(graph, aten.constant_pad_nd.default, x, pads, 0.0)
    return x


def _rewrite(graph, node) -> Any:
    import torch

    aten = torch.ops.aten
    cols, size, kernel, dilation, padding, stride = node.args[:6]
    val = cols.meta["val"]
    out = node.meta["val"]
    (kh, kw), (h, w) = kernel, size
    if val.dim() != 3 or not val.dtype.is_floating_point or kh * kw > MAX_TAPS:
        return None  # an unbatched fold, or a kernel too large for a sum of taps
    if not static_shapes(cols, node) or not all(isinstance(v, int) for v in size):
        return None
    n, channels = val.shape[0], val.shape[1] // (kh * kw)
    if (
        list(stride) == [kh, kw]
        and list(padding) == [0, 0]
        and list(dilation) == [1, 1]
        and h % kh == 0
        and w % kw == 0
    ):
        tiles = call_with_val(graph, aten.reshape.default, cols, [n, channels, kh, kw, h // kh, w // kw])
        tiles = call_with_val(graph, aten.permute.default, tiles, [0, 1, 4, 2, 5, 3])
        return call_with_val(graph, aten.reshape.default, tiles, list(out.shape))
    hp, wp = h + 2 * padding[0], w + 2 * padding[1]
    lh = (hp - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    lw = (wp - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    taps = call_with_val(graph, aten.reshape.default, cols, [n * channels, kh * kw, lh, lw])
    total = None
    for i in range(kh):
        for j in range(kw):
            tap = call_with_val(graph, aten.select.int, taps, 1, i * kw + j)  # (N*C, Lh, Lw)
            placed = _placed(graph, aten, tap, (lh, lw), tuple(stride), (i * dilation[0], j * dilation[1]), (hp, wp))
            total = placed if total is None else call_with_val(graph, aten.add.Tensor, total, placed)
    image = call_with_val(
        graph,
        aten.slice.Tensor,
        call_with_val(graph, aten.slice.Tensor, total, 1, padding[0], padding[0] + h),
        2,
        padding[1],
        padding[1] + w,
    )
    return call_with_val(graph, aten.reshape.default, image, list(out.shape))


class Col2imAsSums:
    name = "col2im-as-sums"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        found = call_functions(exported_program, {torch.ops.aten.col2im.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            _rewrite,
            unchanged="no F.fold (col2im) it can rewrite",
            changed="wrote {count} F.fold(s) as sums of placed taps (a rearrangement where the patches tile the image)",
        )
