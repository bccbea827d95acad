"""A convolution's padding given by name ("same", "valid") as numbers.

`nn.Conv1d(..., padding="same")` (common in audio and sequence models) captures as
`aten.conv1d.padding`, whose padding is a string. litert-torch's decomposition hands that string
on to `aten.convolution`, which takes only integers: `tpuedge check --target android` and every
android or mcu build stopped with a RuntimeError from inside torch (tests/test_passes_conv_padding.py).
The pass writes the padding PyTorch computes for the name: "valid" is none; "same" pads each
spatial dim by dilation * (kernel - 1) in all, half before, the odd one after (torch's own rule),
as the convolution's symmetric padding plus one `constant_pad_nd` for the odd remainder. Exact.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_arguments, call_functions, call_with_val, per_dim, rewritten_calls

__all__ = ["ConvPaddingAsNumbers"]


class ConvPaddingAsNumbers:
    name = "conv-padding-as-numbers"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        numbered = {
            aten.conv1d.padding: aten.conv1d.default,
            aten.conv2d.padding: aten.conv2d.default,
            aten.conv3d.padding: aten.conv3d.default,
        }
        found = [
            n
            for n in call_functions(exported_program, numbered)
            if isinstance(n.args[1], torch.fx.Node) and "val" in n.args[1].meta
        ]

        def rewrite(graph, node):
            x, weight = node.args[:2]
            given = call_arguments(node)
            bias, stride, mode, dilation, groups = (
                given[k] for k in ("bias", "stride", "padding", "dilation", "groups")
            )
            kernel = list(weight.meta["val"].shape[2:])
            dims = len(kernel)
            stride, dilation = per_dim(stride, dims), per_dim(dilation, dims)
            totals = [0] * dims if mode == "valid" else [d * (k - 1) for d, k in zip(dilation, kernel)]
            before = [t // 2 for t in totals]
            odd = [t - 2 * b for t, b in zip(totals, before)]
            if any(odd):  # F.pad order: the last dim first, (before, after) per dim
                pads = [v for o in reversed(odd) for v in (0, o)]
                x = call_with_val(graph, aten.constant_pad_nd.default, x, pads, 0.0)
            return call_with_val(graph, numbered[node.target], x, weight, bias, stride, before, dilation, groups)

        return rewritten_calls(
            self.name,
            exported_program,
            found,
            rewrite,
            unchanged="no convolution with a named padding",
            changed="wrote the named padding of {count} convolution(s) as numbers",
        )
