"""`nn.PixelShuffle` / `nn.PixelUnshuffle` as the reshape, permute and reshape they are.

    pixel_shuffle(x, r):   (N, C·r², H, W) -> view (N, C, r, r, H, W) -> permute (0, 1, 4, 2, 5, 3) -> (N, C, H·r, W·r)
    pixel_unshuffle(x, r): (N, C, H·r, W·r) -> view (N, C, H, r, W, r) -> permute (0, 1, 3, 5, 2, 4) -> (N, C·r², H, W)

litert-torch lowers them to DEPTH_TO_SPACE / SPACE_TO_DEPTH, which ai-edge-quantizer's static
int8 recipe leaves in float (DEPTH_TO_SPACE) or whose channel order is TensorFlow's, so an
ESPCN-style super-resolution net was refused on mcu (tests/test_passes_pixel_shuffle.py).
Written out, the 6-D permute then becomes a 5-D TRANSPOSE between reshapes
(`permute-at-most-5d`), which runs in int8: data movement only, exact.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls, static_shapes

__all__ = ["PixelShuffleAsViews"]


class PixelShuffleAsViews:
    name = "pixel-shuffle-as-views"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, r = node.args[0], int(node.args[1])
            if not static_shapes(x) or x.meta["val"].dim() != 4:
                return None
            n, c, h, w = x.meta["val"].shape
            if node.target == aten.pixel_shuffle.default:
                split, order, out = [n, c // (r * r), r, r, h, w], [0, 1, 4, 2, 5, 3], [n, c // (r * r), h * r, w * r]
            else:
                split, order, out = [n, c, h // r, r, w // r, r], [0, 1, 3, 5, 2, 4], [n, c * r * r, h // r, w // r]
            moved = call_with_val(
                graph, aten.permute.default, call_with_val(graph, aten.reshape.default, x, split), order
            )
            return call_with_val(graph, aten.reshape.default, moved, out)

        found = call_functions(exported_program, {aten.pixel_shuffle.default, aten.pixel_unshuffle.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no pixel shuffle",
            changed="wrote {count} pixel (un)shuffle(s) as reshape, permute, reshape",
        )
