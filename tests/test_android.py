"""android target end to end: the reference models in all four modes against the float IR,
digits accuracy after int8, sizes, int8 I/O, strict int8, the per-op search, channels-last,
byte-identical rebuilds, artifacts, capability. Conversions are shared per module."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize import search_candidates
from tpuedge.edge.litert.convert import program_to_tflite
from tpuedge.edge.litert.float_model import clear_float_cache, float_tflite, tflite_layout_inputs
from tpuedge.edge.litert.litert_runtime import LiteRTRunner, ModelRunError, run_samples
from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
from tpuedge.quantize import QuantConfig
from tpuedge.quantize.metrics import compare_outputs

MODELS = ("build_cnn", "build_depthwise", "build_transformer")
SCHEMES = ("none", "fp16", "dynamic-int8", "int8")


def _samples(program, seed: int, count: int):
    """Inputs of one distribution for calibration and test. Images get a per-image brightness and
    contrast per channel (as photos do): a random-init GAP CNN fed plain noise outputs nearly the
    same vector for every input, and then no accuracy number means anything (see docs/stack-facts.md)."""
    samples = program.example_inputs(seed=seed, count=count)
    rng = np.random.default_rng(seed + 1000)
    for sample in samples:
        for i, x in enumerate(sample):
            if x.ndim == 4:
                c = x.shape[1]
                sample[i] = (x * rng.uniform(0.5, 1.5, (1, c, 1, 1)) + rng.normal(0, 1, (1, c, 1, 1))).astype(x.dtype)
    return samples


@pytest.fixture(scope="module")
def programs():
    import models

    torch.manual_seed(0)
    out = {}
    for name in MODELS:
        module, inputs = getattr(models, name)()
        out[name] = tpuedge.export(module, inputs, name=name)
    return out


@pytest.fixture(scope="module")
def converted(programs):
    """(model, scheme) -> (ConvertedModel, AccuracySummary on held-out inputs), built on demand."""
    cache: dict = {}

    def get(model: str, scheme: str, **config):
        key = (model, scheme, tuple(sorted(config.items())))
        if key not in cache:
            program = programs[model]
            calibration = _samples(program, seed=1, count=32)  # same distribution as the test inputs
            cm = program_to_tflite(program, QuantConfig(scheme=scheme, **config), calibration)
            test = _samples(program, seed=2, count=16)
            runner = LiteRTRunner(cm.tflite)
            outputs = [runner.run(tflite_layout_inputs(s, cm.config.channels_last)) for s in test]
            cache[key] = (cm, compare_outputs([program.run(*s) for s in test], outputs))
        return cache[key]

    return get


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_modes_match_float_model(converted, model, scheme):
    cm, acc = converted(model, scheme)
    # centered cosine: the input-dependent part (a GAP CNN's raw outputs barely move with input)
    if scheme == "none":
        assert acc.max_abs_error <= 1e-4 * acc.output_range, acc.describe()
    elif scheme == "fp16":
        assert acc.centered_cosine >= 0.999, acc.describe()
    elif scheme == "dynamic-int8":
        assert acc.centered_cosine >= 0.995, acc.describe()
    else:
        assert acc.centered_cosine >= 0.98, acc.describe()
    summary = summarize_tflite(cm.tflite)
    if scheme == "int8":
        assert summary.activation_dtypes.get("int8", 0) > summary.activation_dtypes.get("float32", 0)
        assert summary.weight_dtypes.get("int8", 0) > 0
    if scheme == "fp16":
        assert summary.weight_dtypes.get("float16", 0) > 0
    if scheme != "none":  # (graph overhead dominates these tiny files; the weights must shrink)
        assert summary.weight_bytes < 0.6 * summarize_tflite(cm.float_tflite).weight_bytes


def test_digits_int8_keeps_accuracy(digits_model, digits_program, tmp_path):
    import model as digits

    _, _, _, x_test, y_test = digits_model
    artifact = tpuedge.build(
        digits_program, "android", tmp_path / "digits", quantize="int8", calibration=digits.calibration()
    )
    float_acc = np.mean([np.argmax(digits_program.run(x_test[i : i + 1])[0]) == y_test[i] for i in range(len(x_test))])
    int8_acc = np.mean([np.argmax(artifact.run(x_test[i : i + 1])[0]) == y_test[i] for i in range(len(x_test))])
    assert float_acc > 0.95
    assert abs(float_acc - int8_acc) <= 0.015, (float_acc, int8_acc)
    acc = artifact.manifest["accuracy"]
    # measured on the tail of the calibration data that calibration did not use
    assert acc["inputs"] == "held out from calibration" and acc["top1_agreement"] >= 0.97
    assert (
        acc["samples"] == 50 and acc["calibration_samples_used"] == 150 == artifact.manifest["calibration"]["samples"]
    )


def test_accuracy_without_calibration_is_labelled_a_smoke_check(programs, tmp_path):
    artifact = tpuedge.build(programs["build_depthwise"], "android", tmp_path / "f", quantize="none")
    acc = artifact.manifest["accuracy"]
    assert acc["inputs"] == "random inputs: smoke check, not accuracy" and acc["samples"] == 8
    assert "random inputs: smoke check, not accuracy" in artifact.report()


def test_int8_size_of_a_large_model():
    from models import TransformerBlock

    torch.manual_seed(0)
    program = tpuedge.export(
        TransformerBlock(d_model=192, heads=4, ff=768).eval(), (torch.randn(1, 16, 192),), name="big"
    )
    assert program.parameter_count > 400_000  # per-channel scales make ~40 KB of graph: amortized here
    cm = program_to_tflite(program, QuantConfig(scheme="int8"), _samples(program, 1, 16))
    assert len(cm.tflite) <= 0.3 * len(cm.float_tflite), (len(cm.tflite), len(cm.float_tflite))


def test_io_int8_and_strict_int8(converted, programs):
    cm, acc = converted("build_transformer", "int8", io_dtype="int8", strict_int8=True)
    summary = summarize_tflite(cm.tflite)
    assert [t.dtype for t in summary.inputs + summary.outputs] == ["int8", "int8"]
    assert all(t.quantized for t in summary.inputs + summary.outputs)
    assert set(summary.activation_dtypes) == {"int8"} and not summary.float_ops
    assert {d["precision"] for d in cm.recipe["decisions"]} == {"int8"} and cm.recipe["non_int8_ops"] == []
    assert acc.centered_cosine >= 0.98, acc.describe()  # run() quantizes/dequantizes I/O itself
    runner = LiteRTRunner(cm.tflite)
    x = _samples(programs["build_transformer"], 3, 1)[0]
    q_in = runner.inputs[0]
    raw = runner.run_raw([np.clip(np.round(x[0] / q_in.scale[0]) + q_in.zero_point[0], -128, 127).astype(np.int8)])
    assert raw[0].dtype == np.int8
    np.testing.assert_allclose(
        (raw[0].astype(np.float32) - runner.outputs[0].zero_point[0]) * runner.outputs[0].scale[0], runner.run(x)[0]
    )


def _outliers(seed: int, count: int):
    """Transformer inputs whose residual stream has outlier channels (as trained ones do)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        x = rng.standard_normal((1, 16, 64))
        x[..., :4] *= 25.0
        out.append([x.astype(np.float32)])
    return out


@pytest.fixture(scope="module")
def outlier_search():
    """A transformer with peakier attention and outlier inputs, searched with a target all-int8
    misses (0.99999): every sensitive group gets measured at int16 and float."""
    from models import build_transformer

    module, inputs = build_transformer()
    with torch.no_grad():
        module.qkv.weight.mul_(3.0)
    program = tpuedge.export(module, inputs, name="outliers")
    config = QuantConfig(scheme="int8", target_cosine=0.99999)
    real_score = search_candidates.score_candidate

    def spy(tflite, eval_inputs, reference, *runtime):  # the real scoring, counted by model bytes and samples
        _OUTLIER_SEARCH_RUNS.append((hashlib.sha256(tflite).hexdigest(), len(eval_inputs)))
        return real_score(tflite, eval_inputs, reference, *runtime)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_candidates, "score_candidate", spy)
        return program, config, program_to_tflite(program, config, _outliers(1, 32))


_OUTLIER_SEARCH_RUNS: list[tuple[str, int]] = []  # (sha256 of a scored candidate, samples), by outlier_search


def test_the_search_runs_one_model_in_litert_once(outlier_search):
    """Recipes that quantize to the same bytes (a group whose ops the ranked points already made
    int16) are one model: scored once. Old code ran each again on the same samples."""
    _, _, cm = outlier_search
    assert _OUTLIER_SEARCH_RUNS, "the search scored nothing: the spy missed it"
    assert len(set(_OUTLIER_SEARCH_RUNS)) == len(_OUTLIER_SEARCH_RUNS)
    assert cm.recipe["search"]["evaluations"] > len(_OUTLIER_SEARCH_RUNS)  # every recipe still listed


def test_int8_search_measures_sensitive_ops(outlier_search):
    program, _, cm = outlier_search
    recipe = cm.recipe
    kinds = {d["kind"] for d in recipe["decisions"]}
    assert {"layer_norm", "softmax", "gelu", "attention_matmul"} <= kinds
    assert recipe["search"]["evaluations"] >= 1 + len(recipe["decisions"])
    # android's upgrade is a float island: 16-bit activations would run LiteRT's reference kernels
    assert all(set(d["cosine"]) == {"int8", "float"} for d in recipe["decisions"])
    assert recipe["search"]["final_cosine"] >= recipe["search"]["all_int8_cosine"]
    for d in recipe["decisions"]:
        best_gain = d["cosine"]["float"] - d["cosine"]["int8"]
        if d["precision"] == "int8":
            assert "int8 kept" in d["reason"]
        else:  # upgraded only for a measured gain, and listed with its reason
            assert d["cosine"][d["precision"]] > d["cosine"]["int8"] and best_gain >= 1e-4
            assert any(item["group"] == d["group"] and item["why"] for item in recipe["non_int8_ops"])
    summary = summarize_tflite(cm.tflite)
    precisions = {item["precision"] for item in recipe["non_int8_ops"]}
    assert ("float" in precisions) == bool(summary.float_ops)
    assert "int16" not in precisions and not summary.activation_dtypes.get("int16", 0)
    test = _outliers(2, 16)
    runner = LiteRTRunner(cm.tflite)
    acc = compare_outputs([program.run(*s) for s in test], [runner.run(s) for s in test])
    assert acc.centered_cosine >= 0.98, acc.describe()


def test_strict_int8_reports_what_it_costs(outlier_search, programs, tmp_path):
    """--strict-int8 also measures the default mixed recipe on the same samples."""
    program, config, mixed = outlier_search
    strict = program_to_tflite(program, config.replace(strict_int8=True), _outliers(1, 32), report_strict_cost=True)
    cost = strict.recipe["strict_int8_cost"]
    assert set(summarize_tflite(strict.tflite).activation_dtypes) == {"int8", "float32"}  # float only at the I/O
    assert not summarize_tflite(strict.tflite).float_ops
    # the strict side is the all-int8 model; the mixed side is exactly what a default build picks
    assert cost["samples"] == strict.recipe["search"]["samples"] == 32
    assert cost["strict_int8"]["centered_cosine"] == pytest.approx(mixed.recipe["search"]["all_int8_cosine"], abs=1e-6)
    assert cost["mixed"]["centered_cosine"] == pytest.approx(mixed.recipe["search"]["final_cosine"], abs=1e-6)
    assert cost["mixed_non_int8_ops"] == [
        {"group": i["group"], "kind": i["kind"], "precision": i["precision"]} for i in mixed.recipe["non_int8_ops"]
    ]
    assert cost["mixed_non_int8_ops"] and cost["cost"]["centered_cosine"] > 1e-4
    for metric in ("centered_cosine", "cosine"):
        assert cost["cost"][metric] == pytest.approx(cost["mixed"][metric] - cost["strict_int8"][metric], abs=2e-6)

    # the android build: console + manifest. 16 calibration samples: the search (and so the strict
    # cost) measures on the first 8, the artifact's accuracy on the 8 held out from calibration.
    plain = programs["build_transformer"]
    artifact = tpuedge.build(
        plain, "android", tmp_path / "strict", quantize="int8", strict_int8=True, calibration=_samples(plain, 1, 16)
    )
    manifest = artifact.manifest
    cost, acc, search = manifest["recipe"]["strict_int8_cost"], manifest["accuracy"], manifest["recipe"]["search"]
    assert cost["samples"] == search["samples"] == 8 and search["inputs"].startswith("calibration samples")
    assert acc["samples"] == 8 and acc["inputs"] == "held out from calibration"
    assert cost["strict_int8"]["centered_cosine"] == pytest.approx(search["final_cosine"], abs=1e-6)
    assert cost["mixed"]["centered_cosine"] >= cost["strict_int8"]["centered_cosine"] - 1e-6
    assert cost["cost"]["centered_cosine"] == pytest.approx(
        cost["mixed"]["centered_cosine"] - cost["strict_int8"]["centered_cosine"], abs=2e-6
    )
    report = artifact.report()
    line = next(x for x in report.splitlines() if "strict int8 costs" in x)
    assert (
        f"strict {cost['strict_int8']['centered_cosine']:.5f}" in line
        and f"vs {cost['mixed']['centered_cosine']:.5f}" in line
    )


class _GRUTagger(torch.nn.Module):
    """A GRU tagger: android writes a GRU out over time (an LSTM is one fused op there,
    tests/test_sequence_lstm.py)."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(16, 32, batch_first=True)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.gru(x)[0])


def test_gru_int8_measures_its_recurrent_state(tmp_path):
    """A GRU builds in int8; its gates and state updates form one sensitive group that the
    search measures (and upgrades when a target asks for it), as the manifest says."""
    torch.manual_seed(0)
    program = tpuedge.export(_GRUTagger().eval(), (torch.randn(1, 12, 16),), name="gru")
    calibration, test = program.example_inputs(seed=1, count=32), program.example_inputs(seed=2, count=16)
    reference = [program.run(*s) for s in test]

    artifact = tpuedge.build(program, "android", tmp_path / "lstm", quantize="int8", calibration=calibration)
    recipe = artifact.manifest["recipe"]
    [state] = [d for d in recipe["decisions"] if d["kind"] == "recurrent_state"]
    float_model = summarize_tflite(float_tflite(program))  # cached: the one this build quantized
    float_ops = float_model.op_histogram
    in_group = [
        op.split()[0] for op in state["ops"] for _ in range(int(op.rsplit("\u00d7", 1)[1]) if "\u00d7" in op else 1)
    ]  # "op ×count"
    assert state["group"] == "recurrent_state:gru/GRU" and all("gru/GRU" in op for op in state["ops"])
    for gate_op in ("LOGISTIC", "TANH"):  # every gate non-linearity of the unrolled GRU is in the group
        assert in_group.count(gate_op) == float_ops[gate_op] > 0
    assert state["precision"] == "int8" and "meets the target" in state["reason"]
    assert recipe["search"]["all_int8_cosine"] >= 0.995
    int8_acc = compare_outputs(reference, [artifact.run(*s) for s in test])
    # a tagger's (tokens, classes) per sample has no top-1 in the one metrics module (token axis)
    assert int8_acc.centered_cosine >= 0.995 and int8_acc.top1_agreement is None, int8_acc.describe()

    strict_target = program_to_tflite(program, QuantConfig(scheme="int8", target_cosine=0.99999), calibration)
    [state] = [d for d in strict_target.recipe["decisions"] if d["kind"] == "recurrent_state"]
    assert set(state["cosine"]) == {"int8", "float"}
    assert state["precision"] == "float" and state["cosine"]["float"] > state["cosine"]["int8"] + 1e-4
    assert [i["group"] for i in strict_target.recipe["non_int8_ops"]] == ["recurrent_state:gru/GRU"]
    runner = LiteRTRunner(strict_target.tflite)
    upgraded = compare_outputs(reference, [runner.run(s) for s in test])
    assert upgraded.centered_cosine > int8_acc.centered_cosine, (upgraded.describe(), int8_acc.describe())


def test_run_samples_on_threads_gives_one_interpreters_outputs_in_order(converted, programs):
    """The int8 search measures its candidates with run_samples: spread over interpreters on
    threads, each sample's outputs must be the bytes one interpreter gives, in sample order."""
    cm, _ = converted("build_transformer", "int8")
    samples = [
        tflite_layout_inputs(s, cm.config.channels_last)
        for s in _samples(programs["build_transformer"], seed=3, count=7)
    ]
    runner = LiteRTRunner(cm.tflite)
    serial = [runner.run(s) for s in samples]
    for workers in (2, 3):
        spread = run_samples(cm.tflite, samples, workers=workers)
        assert len(spread) == len(samples)
        for one, many in zip(serial, spread):
            assert all(np.array_equal(a, b) for a, b in zip(one, many))


def test_run_samples_passes_on_a_kernels_refusal(monkeypatch, converted, programs):
    cm, _ = converted("build_cnn", "none")
    samples = [
        tflite_layout_inputs(s, cm.config.channels_last) for s in _samples(programs["build_cnn"], seed=3, count=4)
    ]

    def refuse(self, inputs):
        raise ModelRunError("LiteRT stopped running the model: a kernel's check failed")

    monkeypatch.setattr(LiteRTRunner, "run_raw", refuse)
    with pytest.raises(ModelRunError):
        run_samples(cm.tflite, samples, workers=2)


def test_channels_last_has_no_transpose(converted, programs):
    cm, acc = converted("build_cnn", "none", channels_last=True)
    summary = summarize_tflite(cm.tflite)
    assert summary.inputs[0].shape == (1, 32, 32, 3)
    assert "TRANSPOSE" not in summary.op_histogram
    assert acc.max_abs_error <= 1e-4 * acc.output_range


def test_build_is_byte_identical_and_loads(programs, tmp_path):
    program = programs["build_depthwise"]
    cal = _samples(program, 1, 8)
    dirs = []
    for i in range(2):
        clear_float_cache()  # a full lowering each time, not a cached float model
        tpuedge.build(program, "android", tmp_path / f"b{i}", quantize="int8", calibration=cal)
        dirs.append(tmp_path / f"b{i}")
    for name in ("model.tflite", "manifest.json"):
        assert (dirs[0] / name).read_bytes() == (dirs[1] / name).read_bytes(), name
    artifact = tpuedge.load(dirs[0])
    manifest = artifact.manifest
    assert manifest["ir_fingerprint"] == program.fingerprint and manifest["target"] == "android"
    assert manifest["sizes"]["tflite_bytes"] == (dirs[0] / "model.tflite").stat().st_size
    assert manifest["tool_versions"]["litert-torch"].startswith("0.10")
    x = _samples(program, 5, 1)[0]
    from_file = tpuedge.load(dirs[0] / "model.tflite")
    np.testing.assert_array_equal(artifact.run(*x)[0], from_file.run(*x)[0])
    report = artifact.report()
    for text in ("weights", "graph", "ops:", "accuracy vs float IR"):
        assert text in report, report
    # the report shows I/O quantization exactly when the model has quantized I/O
    quantized_io = [t for t in artifact.summary.inputs + artifact.summary.outputs if t.quantized]
    assert ("scale=" in report) == bool(quantized_io), report
    assert (
        "calibration samples: too few to hold any out, so not an accuracy measure" in report
    )  # 8 samples: none held out
    with pytest.raises(tpuedge.UserError, match="expected"):
        artifact.run(np.zeros((1, 3, 16, 16), np.float32))


def test_check_reports_what_litert_cannot_lower(tmp_path):
    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(10, 4, mode="sum")

        def forward(self, ids, offsets):
            return self.bag(ids, offsets)

    program = tpuedge.export(Bag(), (torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2])), name="bag")
    problems = program.check("android")
    assert any("embedding_bag" in p.subject for p in problems), [p.format() for p in problems]
    with pytest.raises(tpuedge.ProblemsError):
        tpuedge.build(program, "android", tmp_path / "bag")
    assert not (tmp_path / "bag").exists()


def test_int8_without_calibration_is_a_user_error(programs, tmp_path):
    with pytest.raises(tpuedge.UserError, match="--calibration"):
        tpuedge.build(programs["build_cnn"], "android", tmp_path / "x", quantize="int8")
    assert not (tmp_path / "x").exists()


def test_check_and_build_share_one_decomposition_and_leave_the_program_alone(tmp_path, monkeypatch):
    """litert-torch's decomposition rewrites its argument's aten.view nodes in place: the
    Program must keep its graph and fingerprint, and check + build decompose once."""
    from tpuedge.edge.litert import litert_lowering

    class Flatten(torch.nn.Module):
        def forward(self, x):
            return (x * 2).view(2, 8)

    program = tpuedge.export(Flatten(), (torch.randn(4, 4),), name="flatten")
    graph_before = [str(n.target) for n in program.exported_program.graph.nodes]
    fingerprint = program.fingerprint
    del program.__dict__["fingerprint"]  # recomputed from the graph after check and build
    calls = []
    real = litert_lowering._decompose
    monkeypatch.setattr(litert_lowering, "_decompose", lambda ep: calls.append(ep) or real(ep))
    clear_float_cache()
    assert program.check("android") == []
    artifact = tpuedge.build(program, "android", tmp_path / "f", quantize="none")
    assert len(calls) == 1
    assert [str(n.target) for n in program.exported_program.graph.nodes] == graph_before
    assert program.fingerprint == fingerprint == artifact.manifest["ir_fingerprint"]
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(artifact.run(x)[0], program.run(x)[0])


def test_litert_passes_remember_a_program_without_keeping_it_alive():
    """litert_ir_passes remembers its answer per program; for a program no pass changes the answer
    is the program itself, and storing it as its own value kept every such program alive."""
    import gc
    import weakref

    from tpuedge.edge.litert.litert_lowering import litert_ir_passes

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    exported = tpuedge.export(Double(), (torch.zeros(2),), name="double").exported_program
    assert litert_ir_passes(exported) is exported and litert_ir_passes(exported) is exported
    alive = weakref.ref(exported)
    del exported
    gc.collect()
    assert alive() is None


def test_accuracy_is_measured_on_eval_data_when_given(digits_model, digits_program, tmp_path):
    _, _, _, x_test, y_test = digits_model
    artifact = tpuedge.build(digits_program, "android", tmp_path / "e", quantize="fp16", eval=(x_test, y_test))
    acc = artifact.manifest["accuracy"]
    assert acc["inputs"] == "eval data" and acc["samples"] == 64  # ACCURACY_SAMPLES of the 360 test images
    assert "64 eval data" in artifact.report()
