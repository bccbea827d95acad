"""The int8 search's float32-weights rung (android): where every op already computes in float
and the model still misses its budget, the int8 weights are the loss, and float32 weights for
the few tensors that cost most (quantize/weight_sensitivity.py) are measured.

The model: a Linear reading one quiet input and fifteen loud ones (a mel power spectrogram's
bands, as in Resemblyzer's speaker encoder), whose quiet input's weights are large. Each output
row's int8 scale is set by that large weight, and the loud inputs' small weights round to zero."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge


class _LoudBands(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
        with torch.no_grad():
            self.fc1.weight[:, 1:] *= 3e-3  # the loud inputs' weights: small
            self.fc1.weight[:, 0] *= 50.0  # the quiet input's: large, setting each row's int8 scale

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _program_and_samples():
    torch.manual_seed(0)
    program = tpuedge.export(_LoudBands().eval(), (torch.zeros(1, 16),), name="loud_bands")
    rng = np.random.default_rng(0)
    scale = np.r_[1.0, np.full(15, 300.0)]
    return program, [((rng.standard_normal((1, 16)) * scale).astype(np.float32),) for _ in range(32)]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")  # the rung's candidates are built here, not read back


def test_the_ranking_names_the_weight_int8_cannot_hold_and_leaves_the_program_as_it_was():
    from tpuedge.quantize.weight_sensitivity import rank_weights

    program, samples = _program_and_samples()
    before = program.run(*samples[0])[0].copy()
    ranking = rank_weights(program, samples[:4])
    assert [w.name for w in ranking] == ["fc1.weight", "fc2.weight"]
    assert ranking[0].loss > 0.05 > 1e-3 > ranking[1].loss
    assert ranking[0].scope == "fc1/Linear" and ranking[0].shape == (32, 16)
    np.testing.assert_array_equal(program.run(*samples[0])[0], before)  # rounded copies were swapped in, not written


def test_per_tensor_rounding_is_ranked_as_the_config_asks():
    from tpuedge.quantize.weight_sensitivity import rank_weights

    program, samples = _program_and_samples()
    per_channel = {w.name: w.loss for w in rank_weights(program, samples[:4])}
    per_tensor = {w.name: w.loss for w in rank_weights(program, samples[:4], per_channel=False)}
    assert per_tensor["fc2.weight"] > per_channel["fc2.weight"]  # one scale for all rows loses more


def test_float32_weights_for_the_costly_tensor_meet_the_budget(tmp_path, monkeypatch):
    """Old code: every op in float (weights int8) was the last rung, and the build failed its
    budget (0.943 on the search's samples)."""
    from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite

    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    program, calibration = _program_and_samples()
    art = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    recipe = art.manifest["recipe"]
    rung = recipe["float_weights"]
    assert rung["kept"] and rung["top"][0]["weight"] == "fc1.weight" and rung["start_score"] < 0.99
    assert rung["prefixes_tried"][0]["weights"] == 1 and rung["cosine"] >= 0.999
    assert [(o["group"], o["precision"]) for o in recipe["non_int8_ops"]] == [
        ("every_op", "float"),
        ("weights:fc1.weight", "float32"),
    ]
    assert art.manifest["accuracy_budget"]["met"]  # on the 8 samples calibration did not see
    summary = summarize_tflite((tmp_path / "int8" / "model.tflite").read_bytes())
    assert summary.weight_dtypes.get("float32", 0) >= 32 * 16 * 4  # fc1's weights
    assert summary.weight_dtypes["int8"] >= 8 * 32  # fc2's stay int8


def test_the_rung_respects_its_size_cap(tmp_path, monkeypatch):
    """With no room for float32 bytes, the weights stay int8 and the build misses its budget (exit 1
    from the CLI), saying what the rung measured."""
    from tpuedge.shared_ir.errors import BudgetError

    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    monkeypatch.setattr("tpuedge.quantize.search_settings.FLOAT_WEIGHTS_BYTES_FLOOR", 0)
    monkeypatch.setattr("tpuedge.quantize.search_settings.FLOAT_WEIGHTS_BYTES_SHARE", 0.0)
    program, calibration = _program_and_samples()
    with pytest.raises(BudgetError):
        tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    assert not (tmp_path / "int8").exists()


def test_dynamic_int8_gives_the_costly_tensor_float32_measured_on_held_out_samples(tmp_path):
    """dynamic-int8 quantizes fc1's input on the fly too, so its loss is there as well. Old code:
    no remedy, and the build missed its budget; the calibration samples were the budget's own."""
    program, calibration = _program_and_samples()
    art = tpuedge.build(program, "android", tmp_path / "dyn", quantize="dynamic-int8", calibration=calibration)
    recipe, manifest = art.manifest["recipe"], art.manifest
    rung = recipe["float_weights"]
    assert rung["kept"] and rung["start_score"] < 0.99 <= rung["cosine"]
    assert [(o["group"], o["precision"]) for o in recipe["non_int8_ops"]] == [("weights:fc1.weight", "float32")]
    assert (
        manifest["calibration"]["held_out_for_accuracy"] > 0
        and manifest["accuracy"]["inputs"] == "held out from calibration"
    )
    assert manifest["accuracy_budget"]["met"]


def test_dynamic_int8_does_not_search_on_the_samples_its_budget_reads(tmp_path):
    """Too few calibration samples to hold any out: the budget reads them all, so no rung runs."""
    program, calibration = _program_and_samples()
    art = tpuedge.build(
        program,
        "android",
        tmp_path / "dyn",
        quantize="dynamic-int8",
        calibration=calibration[:3],
        allow_below_budget=True,
    )
    assert art.manifest["recipe"].get("float_weights") is None
    assert art.manifest["calibration"]["held_out_for_accuracy"] == 0


def test_auto_measures_the_rung_on_its_dynamic_int8_candidate(tmp_path):
    """Old code: auto's dynamic-int8 candidate had no remedy and missed the budget."""
    program, calibration = _program_and_samples()
    art = tpuedge.build(program, "android", tmp_path / "auto", calibration=calibration)
    rows = {c["scheme"]: c for c in art.manifest["recipe"]["auto"]["candidates"]}
    assert rows["dynamic-int8"]["met_budget"] and rows["dynamic-int8"]["detail"] == "1 weight tensor(s) in float32"
    assert art.manifest["accuracy_budget"]["met"]


def test_weights_are_found_in_the_float_model_by_value_else_by_their_module():
    """The converter copies most weights as they are (found by value, in its own layout); where it
    stores one changed, the op of as many elements in the weight's module is taken."""
    import dataclasses

    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.sensitive_groups import weight_groups
    from tpuedge.quantize.weight_sensitivity import rank_weights

    program, samples = _program_and_samples()
    base = float_tflite(program)
    ranking = rank_weights(program, samples[:2])
    groups, scopes = weight_groups(base, ranking, elements_cap=10_000)
    assert [g.key for g in groups] == ["weights:fc1.weight", "weights:fc2.weight"]
    assert [op for _, op in scopes["weights:fc1.weight"]] == ["FULLY_CONNECTED"]
    changed = [dataclasses.replace(w, values=w.values * 2) for w in ranking]
    # fc2's op writes the model output and is named for it ("serving_default_output_0..."), so
    # only its value finds it
    assert [g.key for g in weight_groups(base, changed, elements_cap=10_000)[0]] == ["weights:fc1.weight"]
    lost = [dataclasses.replace(w, values=w.values * 2, scope="Elsewhere") for w in ranking]
    assert weight_groups(base, lost, elements_cap=10_000)[0] == []
    assert [g.key for g in weight_groups(base, ranking, elements_cap=300)[0]] == [
        "weights:fc2.weight"
    ]  # fc1's 512 over the cap


@pytest.mark.parametrize("scheme", ["int8", "dynamic-int8"])
def test_a_cached_rebuild_reads_the_ranking_and_the_candidates_back(tmp_path, monkeypatch, scheme):
    """Old code: the weight ranking (one forward pass per tensor) ran again on every rebuild, and
    dynamic-int8's candidates were quantized and measured again."""
    from tpuedge.edge.litert.float_model import clear_float_cache
    from tpuedge.shared_ir.cache_keys import build_session

    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    monkeypatch.setenv("TPUEDGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TPUEDGE_NO_CACHE")
    outcomes, files = [], []
    for name in ("cold", "warm"):
        clear_float_cache()  # as a fresh process: nothing converted in memory
        program, calibration = _program_and_samples()
        with build_session() as session:
            tpuedge.build(program, "android", tmp_path / name, quantize=scheme, calibration=calibration)
        outcomes.append([(r.stage, r.outcome) for r in session.stages])
        files.append((tmp_path / name / "model.tflite").read_bytes())
    cold, warm = outcomes
    candidates = "quant_candidate" if scheme == "int8" else "dynamic_candidate"  # the two searches' stages
    assert ("weight_ranking", "miss") in cold and (candidates, "miss") in cold
    assert warm == [(stage, "hit") for stage, _ in cold]
    assert files[0] == files[1]


def test_the_kept_dynamic_candidate_quantized_again_must_be_the_model_measured(tmp_path, monkeypatch):
    """Where a prefix measured after the kept one replaced it in memory, the kept recipe is quantized
    again; bytes that differ from the ones measured were shipped without a word. Here the quantizer
    gives different bytes the second time for a recipe: the build stops (an internal error) instead."""
    import tpuedge.edge.litert.quantizer_runner as runner
    import tpuedge.quantize.recipes as search_recipes
    from tpuedge.shared_ir.errors import InternalError

    real_run, real_ranked = runner.run_quantizer, search_recipes.float_ranked

    def run_quantizer(base):
        quantize, seen = real_run(base), []

        def once_then_other(entries, *args):
            data = quantize(entries, *args)
            repeat = entries in seen
            seen.append(entries)
            return data + b"\0" if repeat else data  # a quantizer that is not deterministic

        return once_then_other

    def ranked_then_one_more(groups, evaluate, start, start_cosine, **kw):
        kept = real_ranked(groups, evaluate, start, start_cosine, **kw)
        # one more candidate after it (dynamic-int8 reads only "float32": all-int8 under another key),
        # so the kept one's bytes are no longer in memory
        evaluate({**start, groups[-1].key: "float"})
        return kept

    monkeypatch.setattr(runner, "run_quantizer", run_quantizer)
    monkeypatch.setattr(search_recipes, "float_ranked", ranked_then_one_more)
    program, calibration = _program_and_samples()
    with pytest.raises(InternalError, match="gave different bytes for the dynamic-int8 recipe"):
        tpuedge.build(program, "android", tmp_path / "dyn", quantize="dynamic-int8", calibration=calibration)
    assert not (tmp_path / "dyn").exists()
