"""The per-op precision search: it never returns a recipe worse than one it measured,
and its groups are one per module instance (HF names every norm module `LayerNorm`)."""

from __future__ import annotations

import pytest

from tpuedge.quantize.recipes import SensitiveGroup, choose_precisions


def test_search_never_ends_below_a_recipe_it_measured():
    # Each upgrade alone helps, together they hurt (interacting ranges): a greedy search
    # that applies both ends below all-int8 (0.647 -> 0.642 on a real model).
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
        score = {
            frozenset(): 0.90,
            frozenset({"gelu:a"}): 0.95,
            frozenset({"gelu:b"}): 0.93,
            frozenset({"gelu:c"}): 0.92,
            frozenset({"gelu:a", "gelu:b"}): 0.94,
        }.get(up, 0.91)
        seen[up] = score
        return score

    plan = choose_precisions(groups, evaluate, target_cosine=0.99)
    assert plan.final_cosine == pytest.approx(max(seen.values()))
    assert [d.group for d in plan.non_int8] == ["gelu:a"]


def test_layer_norm_groups_are_one_per_module_instance():
    """Three blocks whose norm attribute is named `LayerNorm` (as HF names it) give three groups."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.sensitive_groups import find_sensitive_groups
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
    assert [g.key for g in norms] == [f"layer_norm:layer.{i}.LayerNorm/LayerNorm" for i in range(3)]


def test_a_layer_named_after_the_norm_before_it_stays_out_of_the_norm_group():
    """The converter named MiniLM's query/key/value projections after the LayerNorm before them
    ("embeddings.LayerNorm/LayerNorm;encoder.layer.0.attention.self.query/Linear"); grouped with that norm, they went float with
    it, weights included: 12 float32 384x384 matrices in an "int8" model (1.26x its parameters)."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.sensitive_groups import find_sensitive_groups
    from tpuedge.shared_ir.program import Program

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.LayerNorm = nn.LayerNorm(16)  # noqa: N815 - the HF attribute name
            self.query = nn.Linear(16, 16)

        def forward(self, x):
            return self.query(self.LayerNorm(x))

    torch.manual_seed(0)
    program = Program(torch.export.export(Block().eval(), (torch.randn(1, 4, 16),)), name="norm_then_linear")
    model = tflite_file.read_model(float_tflite(program))
    graph, names = model.subgraphs[0], tflite_file.operator_names(model)
    norm_name = next(
        tflite_file.text(graph.tensors[int(op.outputs[0])].name)
        for op in graph.operators
        if names[op.opcodeIndex] == "MEAN"
    )
    (fc,) = [op for op in graph.operators if names[op.opcodeIndex] == "FULLY_CONNECTED"]
    out = graph.tensors[int(fc.outputs[0])]
    out.name = (norm_name.split(";")[0] + ";;" + tflite_file.text(out.name)).encode()  # the converter's fused name
    groups, _ = find_sensitive_groups(tflite_file.write_model(model))
    (norm,) = [g for g in groups if g.kind == "layer_norm"]
    assert not [op for op in norm.ops if op.startswith("FULLY_CONNECTED")]


def test_the_search_aims_at_the_budget_metric_too():
    """MTCNN's P-Net: the search met its target on the centered cosine while the budget's mean
    per-sample cosine stayed at 0.98969, so the build failed a budget the search never saw."""
    from tpuedge.quantize.search_score import search_score
    from tpuedge.quantize.metrics import AccuracySummary

    common = dict(max_abs_error=0.1, output_range=1.0, cosine=0.999, top1_agreement=None, samples=8)
    assert search_score(AccuracySummary(centered_cosine=0.996, sample_cosine=0.9897, **common)) == 0.9897
    assert search_score(AccuracySummary(centered_cosine=0.990, sample_cosine=0.9990, **common)) == 0.990
    assert search_score(AccuracySummary(centered_cosine=0.993, **common)) == 0.993  # not measured: centered alone


def test_a_screen_orders_the_groups_and_every_kept_upgrade_is_measured_in_full():
    """The one-group-at-a-time candidates run on the screen (fewer samples); what the plan keeps,
    and the number it reports, come from `evaluate` alone. The screen here is off by a constant
    and slightly noisy: its numbers must never be compared with `evaluate`'s."""
    groups = [SensitiveGroup(f"layer_norm:{i}", "layer_norm") for i in range(6)]
    cost = {"layer_norm:0": 0.05, "layer_norm:3": 0.03, "layer_norm:5": 0.002}  # recovered by float

    def truth(assignment):
        return 0.99 - sum(c for g, c in cost.items() if assignment.get(g, "int8") != "float")

    full: list[dict] = []
    screened: list[dict] = []

    def evaluate(assignment):
        full.append(dict(assignment))
        return truth(assignment)

    def screen(assignment):
        screened.append(dict(assignment))
        noise = 1e-5 * (sum(v == "float" for v in assignment.values()) % 3)
        return truth(assignment) - 0.2 + noise  # fewer samples: another scale altogether

    plan = choose_precisions(groups, evaluate, target_cosine=0.985, screen=screen)
    assert len(screened) == 1 + len(groups)  # all-int8, then each group at its upgrade
    assert all(sum(v != "int8" for v in a.values()) <= 1 for a in screened)
    # kept: the two costly norms (the third's 0.002 is not needed for the target), largest first
    assert plan.assignment == {**{g.key: "int8" for g in groups}, "layer_norm:0": "float", "layer_norm:3": "float"}
    assert plan.final_cosine == pytest.approx(truth(plan.assignment)) and plan.final_cosine >= 0.985
    assert plan.assignment in full  # the plan kept was measured in full
    assert len(full) < len(screened)
    assert plan.evaluations == len(full) + len(screened)


def test_the_search_measures_and_keeps_only_its_upgrade():
    """An integer-only runtime (mcu, upgrades int16): float is never measured, so never chosen,
    even where it would gain more than int16; a group int16 does not help stays int8. LiteRT's
    (android, upgrades float): int16 is never measured, even where it would gain as much."""
    groups = [SensitiveGroup("softmax:a", "softmax"), SensitiveGroup("layer_norm:b", "layer_norm")]
    gains = {("softmax:a", "int16"): 0.004, ("softmax:a", "float"): 0.02, ("layer_norm:b", "float"): 0.01}
    seen: list[dict] = []

    def evaluate(assignment):
        seen.append(dict(assignment))
        return 0.98 + sum(gains.get((k, v), 0.0) for k, v in assignment.items())

    plan = choose_precisions(groups, evaluate, upgrade="int16", target_cosine=0.995)
    assert all(v in ("int8", "int16") for a in seen for v in a.values())
    assert plan.assignment == {"softmax:a": "int16", "layer_norm:b": "int8"}
    assert plan.final_cosine == pytest.approx(0.984)
    seen.clear()
    gains[("layer_norm:b", "int16")] = 0.01  # as much as float: still not measured
    islands = choose_precisions(groups, evaluate, upgrade="float", target_cosine=1.1)  # upgrade both
    assert all(v in ("int8", "float") for a in seen for v in a.values())
    assert islands.assignment == {"softmax:a": "float", "layer_norm:b": "float"}


def test_a_screened_score_is_never_taken_for_a_full_one():
    """The screen scores on other samples: here every screened number is above the full all-int8
    score. A single upgrade that screened no better than all-int8 was still taken as "above every
    combination measured", the screened number compared with the full one, and the search ended
    on a recipe it never measured in full (the int8 search then had no bytes for it: a KeyError)."""
    groups = [SensitiveGroup("layer_norm:a", "layer_norm")]
    full: list[dict] = []

    def evaluate(assignment):
        full.append(dict(assignment))
        return 0.9949

    def screen(assignment):
        return 0.99705 if assignment["layer_norm:a"] == "int8" else 0.99701

    plan = choose_precisions(groups, evaluate, target_cosine=0.995, screen=screen)
    assert plan.assignment == {"layer_norm:a": "int8"}
    assert plan.final_cosine == pytest.approx(0.9949)
    assert plan.assignment in full


def test_the_search_score_follows_the_top1_target_where_a_budget_sets_one():
    """A classifier whose argmax flips under int8 scores below any cosine aim, the closer to its
    top-1 target the higher; without a target, or at it, the cosine alone (old code: the cosine
    0.999998 of a model that agreed on 75% of its samples ended the search at all-int8)."""
    from tpuedge.quantize.search_score import search_score
    from tpuedge.quantize.metrics import AccuracySummary

    def summary(top1):
        return AccuracySummary(
            max_abs_error=0.1,
            output_range=8.0,
            cosine=0.999998,
            centered_cosine=0.999998,
            top1_agreement=top1,
            samples=16,
            sample_cosine=0.999998,
        )

    assert search_score(summary(0.75)) == 0.999998
    assert search_score(summary(0.75), 0.99) == pytest.approx(0.999998 * 0.75 / 0.99)
    assert search_score(summary(0.9), 0.99) > search_score(summary(0.75), 0.99)
    assert search_score(summary(1.0), 0.99) == search_score(summary(None), 0.99) == 0.999998
