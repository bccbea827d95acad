"""A transposed convolution's padding as a crop of its unpadded output.

    conv_transpose(x, w, b, stride, padding=p, output_padding=o) -> conv_transpose(x, w, b, stride)[..., p : p + out]

The converter legalizes a transposed convolution to TRANSPOSE_CONV only where its output crop is
TensorFlow's VALID or SAME. `nn.ConvTranspose2d(c, c, 3, stride=2, padding=1, output_padding=1)`,
the usual U-Net / autoencoder upsampler, crops one row before and none after, which SAME does not
(it crops after): litert-torch failed with "failed to legalize operation 'mhlo.convolution'", an
internal error on android and mcu (tests/test_passes_conv_transpose_crop.py). Without padding
the converter takes every case; the crop is a slice per padded dim (STRIDED_SLICE). The bias is
added before the crop, everywhere, so the kept values are torch's. Left alone: an output padding
wider than the padding (its extra rows lie outside the unpadded output), symbolic shapes.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import (
    call_arguments,
    call_functions,
    call_with_val,
    per_dim,
    rewritten_calls,
    static_shapes,
)

__all__ = ["TransposedConvAsCrop"]


class TransposedConvAsCrop:
    name = "transposed-conv-as-crop"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        targets = {aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input}

        def rewrite(graph, node):
            x, weight = node.args[:2]
            if not (isinstance(weight, torch.fx.Node) and static_shapes(x, node)):
                return None
            given = call_arguments(node)
            bias, stride, padding, output_padding, groups, dilation = (
                given[k] for k in ("bias", "stride", "padding", "output_padding", "groups", "dilation")
            )
            dims = weight.meta["val"].dim() - 2
            padding, output_padding = per_dim(padding, dims), per_dim(output_padding, dims)
            if not any(padding) or any(o > p for o, p in zip(output_padding, padding)):
                return None
            out = call_with_val(
                graph,
                node.target,
                x,
                weight,
                bias,
                per_dim(stride, dims),
                [0] * dims,
                [0] * dims,
                groups,
                per_dim(dilation, dims),
            )
            wanted = node.meta["val"].shape[-dims:]
            for axis, (start, size) in enumerate(zip(padding, wanted)):
                if start or out.meta["val"].shape[axis - dims] != size:
                    out = call_with_val(
                        graph, aten.slice.Tensor, out, axis - dims + out.meta["val"].dim(), start, start + int(size)
                    )
            return out

        return rewritten_calls(
            self.name,
            exported_program,
            call_functions(exported_program, targets),
            rewrite,
            unchanged="no padded transposed convolution",
            changed="wrote {count} padded transposed convolution(s) as an unpadded one and a crop",
        )
