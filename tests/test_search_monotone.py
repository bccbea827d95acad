"""The per-op precision search (issue 9.4): it never returns a recipe worse than one it measured,
and its groups are one per module instance (HF names every norm module `LayerNorm`)."""

from __future__ import annotations

import pytest

from tpuedge.quantize.recipes import SensitiveGroup, choose_precisions


def test_search_never_ends_below_a_recipe_it_measured():
    # Each upgrade alone helps, together they hurt (interacting ranges): the old greedy search
    # applied both and ended below all-int8, the 0.647 -> 0.642 of issue 9.
    groups = [SensitiveGroup("layer_norm:a", "layer_norm"), SensitiveGroup("softmax:b", "softmax")]
    scores = {
        (): 0.647,
        (("layer_norm:a", "float"),): 0.660,
        (("layer_norm:a", "int16"),): 0.655,
        (("softmax:b", "float"),): 0.650,
        (("softmax:b", "int16"),): 0.649,
    }
    seen: dict = {}

    def evaluate(assignment):
        key = tuple(sorted((k, v) for k, v in assignment.items() if v != "int8"))
        seen[key] = scores.get(key, 0.642)  # any combination of the two: worse than all-int8
        return seen[key]

    plan = choose_precisions(groups, evaluate, target_cosine=0.99)
    assert plan.final_cosine >= max(seen.values()) - 1e-12
    assert plan.final_cosine == pytest.approx(0.660)
    assert plan.assignment == {"layer_norm:a": "float", "softmax:b": "int8"}
    assert plan.final_cosine >= plan.all_int8_cosine


def test_search_prefers_a_single_upgrade_that_beats_the_greedy_combination():
    groups = [SensitiveGroup("gelu:a", "gelu"), SensitiveGroup("gelu:b", "gelu"), SensitiveGroup("gelu:c", "gelu")]
    seen: dict = {}

    def evaluate(assignment):
        up = frozenset(k for k, v in assignment.items() if v != "int8")
        score = {frozenset(): 0.90, frozenset({"gelu:a"}): 0.95, frozenset({"gelu:b"}): 0.93,
                 frozenset({"gelu:c"}): 0.92, frozenset({"gelu:a", "gelu:b"}): 0.94}.get(up, 0.91)
        seen[up] = score
        return score

    plan = choose_precisions(groups, evaluate, target_cosine=0.99)
    assert plan.final_cosine == pytest.approx(max(seen.values()))
    assert [d.group for d in plan.non_int8] == ["gelu:a"]


def test_layer_norm_groups_are_one_per_module_instance():
    """Three blocks whose norm attribute is named `LayerNorm` (as HF names it) give three groups."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tpuedge.edge.convert import float_tflite
    from tpuedge.edge.quantizer_recipes import find_sensitive_groups
    from tpuedge.shared_ir.program import Program

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(16, 16)
            self.LayerNorm = nn.LayerNorm(16)  # noqa: N815 - the HF attribute name is the point

        def forward(self, x):
            return self.LayerNorm(x + self.dense(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList([Block() for _ in range(3)])

        def forward(self, x):
            for block in self.layer:
                x = block(x)
            return x

    torch.manual_seed(0)
    program = Program(torch.export.export(Encoder().eval(), (torch.randn(1, 4, 16),)), name="hf_like_encoder")
    groups, scopes = find_sensitive_groups(float_tflite(program))
    norms = [g for g in groups if g.kind == "layer_norm"]
    assert len(norms) == 3, [g.key for g in norms]
    assert len({g.key for g in groups}) == len(groups) == len(scopes)
    assert all("Block_" in g.key for g in norms)
