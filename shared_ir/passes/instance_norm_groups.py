"""`nn.InstanceNorm*d` as a group norm with one group per channel.

instance_norm(x, w, b, use_input_stats=True, eps) normalizes each channel of each sample over
its spatial positions, which is group_norm(x, C, w, b, eps) by definition. TFLite-Micro's check
has no entry for `aten.instance_norm` (litert-torch decomposes it its own way), while a group
norm becomes MEAN, SQUARED_DIFFERENCE, RSQRT, MUL and ADD, all int8 (style-transfer and audio
denoising nets were refused on mcu: tests/test_passes_instance_norm.py). An instance norm that
uses running statistics (track_running_stats=True in eval mode) is a batch norm: left for the
check. Exact in float up to the order of the sums.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewritten_calls

__all__ = ["InstanceNormAsGroupNorm"]


class InstanceNormAsGroupNorm:
    name = "instance-norm-as-group-norm"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten

        def rewrite(graph, node):
            x, weight, bias, _mean, _var, use_input_stats, _momentum, eps = node.args[:8]
            channels = x.meta["val"].shape[1]
            if not use_input_stats or not isinstance(channels, int):
                return None
            return call_with_val(graph, aten.group_norm.default, x, channels, weight, bias, eps, False)

        return rewritten_calls(
            self.name,
            exported_program,
            call_functions(exported_program, {aten.instance_norm.default}),
            rewrite,
            unchanged="no instance norm over its input's statistics",
            changed="wrote {count} instance norm(s) as group norms with a group per channel",
        )
