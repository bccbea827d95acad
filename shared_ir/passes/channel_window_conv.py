"""An average over a window of channels (LocalResponseNorm's) as a 1x1 convolution with a
constant band matrix: CONV_2D (CONV_1D for 3-D inputs), which every LiteRT runtime and int8
recipe takes.

torch writes `nn.LocalResponseNorm` (AlexNet-era CNNs, Caffe ports such as OpenFace's face
embedder) as squares viewed as (N, 1, C, ...), zero-padded along C, and an avg_pool3d (avg_pool2d
for 3-D inputs) with window (k, 1, ...) and stride 1. litert-torch lowers that pool to a
STABLEHLO_REDUCE_WINDOW, where ai-edge-quantizer stopped every android int8 build, and mcu has
no 3-D pool. out[o] = (1/k) Σ_{j<k} padded[o + j] = Σ_c W[o, c]·x[c] with W[o, c] = 1/k where
0 <= c + before - o < k: exact in float (tests/test_passes_channel_window.py).
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    rewritten_calls,
    static_shapes,
)

__all__ = ["ChannelWindowAsConvolution"]


def _channel_padding(node, aten, spatial: int) -> tuple[Any, int, int] | None:
    """(unpadded input, zeros before, zeros after) when `node` zero-pads only dim 2 (the channels)."""
    if node.op != "call_function" or node.target not in (aten.pad.default, aten.constant_pad_nd.default):
        return None
    given = call_arguments(node)
    if given.get("mode", "constant") != "constant" or (given["value"] or 0) != 0:
        return None
    pad = list(given["pad"])
    if len(pad) != 2 * spatial + 2 or any(pad[: 2 * spatial]):
        return None
    return given["self"], int(pad[-2]), int(pad[-1])


class ChannelWindowAsConvolution:
    name = "channel-window-as-convolution"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        convolutions = {1: aten.conv1d.default, 2: aten.conv2d.default}

        def rewrite(program, graph, node):
            given = call_arguments(node)
            source = given["self"]
            if not static_shapes(source, node) or source.meta["val"].dim() not in (4, 5):
                return None
            spatial = source.meta["val"].dim() - 3  # (N, 1, C, *spatial): the pool's first window dim is C
            window, stride = list(given["kernel_size"]), list(given["stride"])
            if (
                source.meta["val"].shape[1] != 1
                or len(window) != spatial + 1
                or any(w != 1 for w in window[1:])
                or stride != [1] * (spatial + 1)
                or any(given["padding"])
                or given["ceil_mode"]
                or not given["count_include_pad"]
                or given["divisor_override"]
            ):
                return None
            before, after = 0, 0
            padded = _channel_padding(source, aten, spatial)
            if padded is not None:
                source, before, after = padded
            x = call_with_val(graph, aten.squeeze.dim, source, 1)
            channels, k = x.meta["val"].shape[1], window[0]
            out_channels = channels + before + after - k + 1
            band = torch.zeros(out_channels, channels, *[1] * spatial, dtype=x.meta["val"].dtype)
            for o in range(out_channels):
                for c in range(max(0, o - before), min(channels, o - before + k)):
                    band[(o, c) + (0,) * spatial] = 1.0 / k
            weight = lift_constant(program, f"_{node.name}_band", band, x)
            conv = call_with_val(
                graph, convolutions[spatial], x, weight, None, [1] * spatial, [0] * spatial, [1] * spatial, 1
            )
            return call_with_val(graph, aten.unsqueeze.default, conv, 1)

        found = call_functions(exported_program, {aten.avg_pool2d.default, aten.avg_pool3d.default})
        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no average over a window of channels",
            changed="wrote {count} average(s) over a window of channels as a 1x1 convolution",
            with_program=True,
        )
