"""Int8 sensitivity over every IR point (quantize/sensitivity.py) and the int16 upgrade of the
costliest ones in the android int8 search (quantize/recipes.upgrade_ranked, quantize/search_rungs.py), and
float islands for them as the search's last resort (quantize/recipes.float_ranked)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
from tpuedge.quantize.activation_ranges import quant_points
from tpuedge.quantize.recipes import SensitiveGroup, float_ranked, upgrade_ranked
from tpuedge.quantize.sensitivity import rank_quant_points
from tpuedge.shared_ir.targets import ir_evaluator


class OutlierResidual(torch.nn.Module):
    """A residual MLP whose stream carries one channel 100x the others, as a pretrained BERT's
    residual stream does: per-tensor int8 of that stream spends its grid on the one channel.
    No op here is of a kind the kind-based search groups (norms, softmax, GELU, attention)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)
        self.register_buffer("gain", torch.ones(16))
        self.gain[0] = 100.0
        with torch.no_grad():  # the layers read the big channel at the others' scale
            for layer in (self.fc1, self.fc2, self.head):
                layer.weight[:, 0] /= 100.0

    def forward(self, x):
        h = x * self.gain
        h = h + self.fc1(h)
        h = h + self.fc2(torch.relu(h))
        return self.head(h)


@pytest.fixture(scope="module")
def outlier_program():
    torch.manual_seed(0)
    return tpuedge.export(OutlierResidual().eval(), (torch.zeros(1, 16),), name="outlier")


def _samples(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, 16)).astype(np.float32)] for _ in range(count)]


def test_every_point_is_ranked_and_the_outlier_stream_comes_first(outlier_program):
    ranking = rank_quant_points(outlier_program, _samples(32, 0), _samples(8, 1), evaluator=ir_evaluator())
    assert {s.node for s in ranking} == set(quant_points(outlier_program).points)
    assert {s.node for s in ranking[:3]} == {"mul", "add", "add_1"}  # the three values that hold the big channel
    assert ranking[0].loss > 20 * max(s.loss for s in ranking[3:])
    assert ranking[0].high > 100 and ranking[0].scope.endswith("OutlierResidual")  # range and litert-style scope


def test_upgrade_ranked_stops_at_the_target_and_never_returns_worse():
    groups = [SensitiveGroup(f"ranked:p{i}", "ranked") for i in range(10)]
    scores = {0: 0.80, 1: 0.85, 2: 0.93, 4: 0.996, 8: 0.999}
    seen = []

    def evaluate(assignment):
        seen.append(len(assignment))
        assert set(assignment.values()) == {"int16"}
        return scores[len(assignment)]

    assignment, cosine, tried = upgrade_ranked(groups, evaluate, 0.80, target_cosine=0.995)
    assert seen == [1, 2, 4] and len(assignment) == 4 and cosine == 0.996
    assert tried == [(1, 0.85), (2, 0.93), (4, 0.996)]
    # no prefix better than all-int8: nothing is upgraded
    assignment, cosine, _ = upgrade_ranked(groups, lambda a: 0.7, 0.80, target_cosine=0.995)
    assert assignment == {} and cosine == 0.80


def test_float_ranked_goes_on_top_of_the_search_and_never_returns_worse():
    groups = [SensitiveGroup(f"ranked:p{i}", "ranked") for i in range(10)]
    start = {"ranked:p0": "int16", "softmax:op3": "int16"}  # what int16 and the kind groups chose
    scores = {1: 0.97, 2: 0.996}

    def evaluate(assignment):
        assert assignment["softmax:op3"] == "int16"  # kept from the search before
        return scores[sum(v == "float" for v in assignment.values())]

    assignment, cosine, tried = float_ranked(groups, evaluate, start, 0.96, target_cosine=0.995)
    assert assignment == {"ranked:p0": "float", "ranked:p1": "float", "softmax:op3": "int16"} and cosine == 0.996
    assert tried == [(1, 0.97), (2, 0.996)]
    # no prefix better than where the search stood: nothing changes
    assignment, cosine, _ = float_ranked(groups, lambda a: 0.9, start, 0.96, target_cosine=0.995)
    assert assignment == start and cosine == 0.96


def test_an_outlier_residual_stream_meets_the_int8_budget(outlier_program, tmp_path):
    """The kind-based search had nothing to upgrade here and the build missed its budget (held-out
    cosine 0.92); the ranked points, upgraded, bring it above 0.99. On android the upgrade is a
    float island, never 16-bit activations: LiteRT runs those on its reference kernels (old code:
    int16 here, and MiniLM-L6's int8 model 15x slower than its float one)."""
    art = tpuedge.build(outlier_program, "android", tmp_path / "int8", quantize="int8", calibration=_samples(48, 2))
    recipe = art.manifest["recipe"]
    assert recipe["search"]["all_int8_cosine"] < 0.95
    assert recipe["sensitivity"]["top"][0]["node"] in {"mul", "add", "add_1"}
    upgraded = [o for o in recipe["non_int8_ops"] if o["kind"] == "ranked"]
    assert upgraded and all(o["precision"] == "float" for o in upgraded)
    assert recipe["sensitivity"]["precision"] == "float"
    accuracy = art.manifest["accuracy"]
    assert accuracy["inputs"] == "held out from calibration" and accuracy["sample_cosine"] >= 0.99
    from tpuedge.edge.flatbuffer.tflite_file import read_model

    graph = read_model((tmp_path / "int8" / "model.tflite").read_bytes()).subgraphs[0]
    assert not any(t.type == 7 for t in graph.tensors)  # no TensorType.INT16 anywhere
    assert any(t.type == 9 for t in graph.tensors)  # the rest int8 (TensorType.INT8)
    assert [graph.tensors[i].type for i in graph.outputs] == [0]  # TensorType.FLOAT32 output


class Cancellation(torch.nn.Module):
    """A small signal carried next to a huge one and recovered by subtraction: an 8- or 16-bit grid
    that holds the huge stream (+-1.8e5) loses the small one; only float keeps it."""

    def __init__(self):
        super().__init__()
        self.big, self.small, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        big = self.big(x) * 1e5
        return self.head((big + self.small(x)) - big)


def test_float_islands_where_16_bits_are_not_enough(tmp_path):
    """int16 for the top-ranked point was once the search's last step, and the build missed its
    budget (held-out cosine 0.153). The top-ranked points become float islands, the fewest that
    reach the budget on the search's samples (here one)."""
    torch.manual_seed(0)
    program = tpuedge.export(Cancellation().eval(), (torch.zeros(1, 16),), name="cancellation")
    art = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=_samples(48, 3))
    recipe = art.manifest["recipe"]
    tried = recipe["sensitivity"]["prefixes_tried"]
    assert tried[0]["groups"] == 1 and recipe["search"]["final_cosine"] >= 0.9925
    floated = [o for o in recipe["non_int8_ops"] if o["kind"] == "ranked"]
    assert floated and all(o["precision"] == "float" for o in floated)
    assert art.manifest["accuracy_budget"]["met"] and art.manifest["accuracy"]["inputs"] == "held out from calibration"
    # the island computing the output (the head) keeps its weights int8: float32 only for its bias
    # (old code: the head's 16x4 weight matrix stored as float32, islands grew the file)
    weights = summarize_tflite((tmp_path / "int8" / "model.tflite").read_bytes()).weight_dtypes
    assert weights["int8"] == 16 * 16 + 16 * 16 + 16 * 4 and weights.get("float32", 0) <= 4 * 4, weights


def test_an_mcu_build_below_budget_says_where_int8_costs_most(outlier_program, tmp_path):
    """In strict int8 the outlier stream misses the budget on mcu: the error lists the costliest IR
    points (the ones holding the big channel first), with range and source line. (Without
    --strict-int8, every activation at 16 bits meets it.)"""
    from tpuedge.shared_ir.errors import BudgetError

    with pytest.raises(BudgetError) as caught:
        tpuedge.build(outlier_program, "mcu", tmp_path / "mcu", calibration=_samples(48, 2), strict_int8=True)
    text = str(caught.value)
    lines = text.split("Where int8 costs most", 1)[1].splitlines()[1:4]
    assert all(any(f"  {node} (aten." in line for node in ("mul", "add", "add_1")) for line in lines), text
    assert " at test_quant_sensitivity.py:" in lines[0] and "range [" in lines[0]
    assert not (tmp_path / "mcu").exists()


def test_the_ranking_in_the_manifest_does_not_depend_on_the_working_folder(outlier_program, tmp_path, monkeypatch):
    """The manifest names each ranked point's source by file name, not by a path relative to the
    working folder: the same build run from two folders writes the same bytes."""
    from pathlib import Path

    manifests = []
    for where in (Path(__file__).resolve().parents[1], tmp_path):
        monkeypatch.chdir(where)
        out = tmp_path / f"from_{len(manifests)}"
        tpuedge.build(outlier_program, "android", out, quantize="int8", calibration=_samples(48, 2))
        manifests.append((out / "manifest.json").read_bytes())
    assert manifests[0] == manifests[1]
    assert b"test_quant_sensitivity.py:" in manifests[0]


def test_auto_measures_its_int8_candidate_without_the_ranking(outlier_program, tmp_path):
    """--quantize auto keeps its int8 candidate as the search alone makes it (rank_points off, see
    quantize/config.py): no ranked group in it."""
    art = tpuedge.build(outlier_program, "android", tmp_path / "auto", quantize="auto", calibration=_samples(48, 2))
    [int8] = [c for c in art.manifest["recipe"]["auto"]["candidates"] if c["scheme"] == "int8"]
    # ranked, two groups would be float islands; unranked, no group reaches the budget and the
    # search's last resort puts every op in float (android's upgrade; weights stay int8)
    assert int8["detail"] == "every op in float (weights int8)"
    # and what every op at int8 scored before that, whichever scheme auto took
    search = art.manifest["recipe"]["auto"]["int8_search"]
    assert search["all_int8_cosine"] < search["final_cosine"] and search["samples"] > 0


def test_merge_by_kind_gives_every_group_of_a_kind_its_kinds_precision():
    from tpuedge.quantize.recipes import merge_by_kind

    groups = [
        SensitiveGroup("layer_norm:a", "layer_norm", ("ADD a",)),
        SensitiveGroup("softmax:op3", "softmax", ("SOFTMAX",)),
        SensitiveGroup("layer_norm:b", "layer_norm", ("ADD b",)),
    ]
    merged, expand = merge_by_kind(groups)
    assert [(g.key, g.ops) for g in merged] == [("kind:layer_norm", ("ADD a", "ADD b")), ("kind:softmax", ("SOFTMAX",))]
    assert expand({"kind:layer_norm": "int16", "kind:softmax": "int8"}) == {
        "layer_norm:a": "int16",
        "layer_norm:b": "int16",
        "softmax:op3": "int8",
    }
    assert expand({"ranked:x": "float"}) == {"ranked:x": "float"}  # keys of no kind pass through


class _Wrapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = OutlierResidual()

    def forward(self, x):
        return self.inner(x)


def test_a_ranked_point_finds_its_ops_in_the_float_model_by_module_scope():
    """The ranking names each point's module in the form the LiteRT float model's tensor names
    take (qualified name and class, written once at lowering); the edge search finds the
    ops a point became by it. A mismatch of forms (the class's Python path on one side) finds
    none, and the search silently upgrades nothing."""
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.sensitive_groups import ranked_groups

    torch.manual_seed(0)
    program = tpuedge.export(_Wrapped().eval(), (torch.zeros(1, 16),), name="wrapped")
    ranking = rank_quant_points(program, _samples(32, 0), _samples(8, 1), evaluator=ir_evaluator())
    assert ranking[0].scope == "inner/OutlierResidual", ranking[0].scope
    groups, scopes = ranked_groups(float_tflite(program), ranking)
    first = groups[0]
    assert first.kind == "ranked" and first.key == f"ranked:{ranking[0].node}" and scopes[first.key], groups


def test_upgrade_ranked_without_float_islands_leaves_output_companions_int8():
    """mcu: a ranked point's op that writes a model output stays int8 (no float island); the
    ranked points themselves still go int16, a prefix at a time."""
    groups = [
        SensitiveGroup("ranked:a", "ranked"),
        SensitiveGroup("ranked:a:output", "ranked_output"),
        SensitiveGroup("ranked:b", "ranked"),
    ]
    seen: list[dict] = []

    def evaluate(assignment):
        seen.append(dict(assignment))
        return 0.9 + 0.05 * sum(v == "int16" for v in assignment.values())

    assignment, cosine, tried = upgrade_ranked(groups, evaluate, 0.9, target_cosine=0.995, precision="int16")
    assert assignment == {"ranked:a": "int16", "ranked:b": "int16"} and cosine == pytest.approx(1.0)
    assert all("float" not in a.values() and "ranked:a:output" not in a for a in seen)
    assert [k for k, _ in tried] == [1, 2]


class _LinearIntoNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.ln, self.head = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
        with torch.no_grad():
            self.fc.weight[0] *= 400.0  # one outlier channel: the Linear's output ranks first

    def forward(self, x):
        return self.head(self.ln(self.fc(x)))


def test_a_ranked_points_group_reads_its_value_through_a_reshape():
    """litert-torch puts a RESHAPE in front of a decomposed LayerNorm. The ranked Linear's group
    held the Linear and that RESHAPE only, so the LayerNorm's MEAN read an int8 requantized copy
    and the int16 candidate scored exactly as all-int8 did; the group now reaches the ops that
    read the value through the reshape."""
    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.sensitive_groups import ranked_groups

    torch.manual_seed(0)
    program = tpuedge.export(_LinearIntoNorm().eval(), (torch.zeros(1, 16),), name="into_norm")
    ranking = rank_quant_points(program, _samples(24, 0), _samples(4, 1), evaluator=ir_evaluator())
    assert ranking[0].node == "linear"
    groups, _ = ranked_groups(float_tflite(program), ranking)
    ops = {op.split()[0] for op in groups[0].ops}
    assert {"FULLY_CONNECTED", "RESHAPE", "MEAN", "SQUARED_DIFFERENCE"} <= ops, groups[0].ops


def test_an_op_in_a_float_island_and_an_int16_group_computes_in_float(outlier_program, tmp_path):
    """The float-island last resort goes on top of the ranked int16 groups, which can hold the same
    ops. ai-edge-quantizer applies recipe entries in order, the later winning; in key order a
    "ranked:" group's int16 came after a "layer_norm:"/"recurrent_state:" group's float and the island
    was silently int16 (Resemblyzer: its float LSTM island scored exactly as int16, 0.843)."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.quantize.config import QuantConfig

    tpuedge.build(outlier_program, "android", tmp_path / "float", quantize="none")
    data = (tmp_path / "float" / "model.tflite").read_bytes()
    model = tflite_file.read_model(data)
    graph, names = model.subgraphs[0], tflite_file.operator_names(model)
    fc = [
        (tfl.get_op_scope(op, graph.tensors), names[op.opcodeIndex])
        for op in graph.operators
        if names[op.opcodeIndex] == "FULLY_CONNECTED"
    ][0]
    scopes = {"a_island": [fc], "ranked:fc": [fc]}  # the island's key sorts first
    quantize = run_quantizer(data)
    recipe = quantizer_recipe(QuantConfig(scheme="int8"))
    quantize.calibrate(recipe, [{"x": s[0]} for s in _samples(8, 0)])
    quantized = tflite_file.read_model(
        quantize(quantizer_recipe(QuantConfig(scheme="int8"), {"a_island": "float", "ranked:fc": "int16"}, scopes))
    )
    graph, names = quantized.subgraphs[0], tflite_file.operator_names(quantized)
    outputs = [
        tflite_file.dtype_name(graph.tensors[op.outputs[0]].type)
        for op in graph.operators
        if names[op.opcodeIndex] == "FULLY_CONNECTED"
    ]
    assert outputs[0] == "float32", outputs


class TwoLayerLSTM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 8, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def test_a_program_with_too_many_points_is_not_ranked(monkeypatch):
    """An LSTM unrolled over time (as the android int8 build does) has ~30 points per step and
    layer: Resemblyzer's 3 layers over 160 frames have 5,276, and ranking them compiled for 195 s
    (7 GB) in the int8 search, and again in the mcu budget error's "where int8 costs most". Over
    MAX_RANKED_POINTS the ranking stops before lowering anything, and the search says why there
    is no ranking and goes on with its op groups (the LSTM's recurrent state among them)."""
    from tpuedge.edge.android.android_convert import int8_rewrites
    from tpuedge.edge.litert.litert_candidates import LiteRTCandidates
    from tpuedge.quantize import sensitivity
    from tpuedge.quantize.config import QuantConfig
    from tpuedge.quantize.search_rungs import upgrade_ranked_points

    torch.manual_seed(0)
    program, _ = int8_rewrites(tpuedge.export(TwoLayerLSTM().eval(), (torch.zeros(1, 6, 4),), name="lstm"))
    assert len(quant_points(program).points) > 40
    monkeypatch.setattr(sensitivity, "MAX_RANKED_POINTS", 40)

    def never(*args, **kwargs):
        raise AssertionError("lowered to JAX anyway")

    monkeypatch.setattr("tpuedge.cloud.interpreter.to_jax", never)
    with pytest.raises(sensitivity.TooManyPoints, match="more than the 40 the ranking measures"):
        rank_quant_points(program, [[np.zeros((1, 6, 4), np.float32)]], evaluator=ir_evaluator())
    config = QuantConfig(scheme="int8")
    backend = LiteRTCandidates(program, config, b"", None, target=None)
    ranked = upgrade_ranked_points(program, backend, [], [], {}, never, 0.5, config)
    assert ranked["assignment"] == {} and ranked["groups"] == []
    assert "more than the 40 the ranking measures" in ranked["report"]["unavailable"]
