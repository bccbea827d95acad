"""graph_edit's argument helpers: what the passes read a call's arguments through."""

from __future__ import annotations

import torch

from tpuedge.shared_ir.passes.graph_edit import call_arguments, per_dim


def _calls(module, *example):
    ep = torch.export.export(module.eval(), example)
    return {n.target: n for n in ep.graph.nodes if n.op == "call_function"}


class _Mixed(torch.nn.Module):
    """Arguments given by position, by keyword, keyword-only, and left to the schema's default."""

    def forward(self, x, q):
        y = torch.nn.functional.leaky_relu(x, 0.2)  # by position
        y = torch.nn.functional.pad(y, (1, 1), mode="reflect")  # mode by keyword, value defaulted
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.5)  # scale keyword-only
        return torch.amax(y, dim=-1), torch.addcmul(a, a, a, value=2.0)


def test_call_arguments_names_every_argument_given_or_defaulted():
    aten = torch.ops.aten
    calls = _calls(_Mixed(), torch.randn(1, 2, 6), torch.randn(1, 1, 3, 4))
    leaky = call_arguments(calls[aten.leaky_relu.default])
    assert leaky["negative_slope"] == 0.2 and leaky["self"].op == "placeholder"
    amax = call_arguments(calls[aten.amax.default])
    assert list(amax["dim"]) == [-1] and amax["keepdim"] is False  # keepdim: the schema's default
    sdpa = call_arguments(calls[aten.scaled_dot_product_attention.default])
    assert sdpa["is_causal"] is True and sdpa["scale"] == 0.5 and sdpa["attn_mask"] is None and sdpa["dropout_p"] == 0.0
    assert sdpa["enable_gqa"] is False
    assert call_arguments(calls[aten.addcmul.default])["value"] == 2.0


def test_call_arguments_reads_keyword_arguments_past_the_positional_ones():
    """A keyword given where earlier positions are missing (pad's mode with no value): read
    node.args[i] only when i < len(args), else the keyword."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.pad.default, (x, [1, 1]), {"mode": "replicate"})
    given = call_arguments(node)
    assert given["mode"] == "replicate" and given["value"] is None and given["pad"] == [1, 1]


def test_per_dim_spreads_one_value_over_the_spatial_dims():
    assert per_dim(2, 2) == [2, 2] and per_dim([3], 3) == [3, 3, 3] and per_dim((1, 2), 2) == [1, 2]
