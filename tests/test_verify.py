"""`tpuedge verify` on the trained digits CNN in the real runtimes (LiteRT, TFLite-Micro, XLA CPU).

Builds are module-scoped; the CLI runs in-process with a saved .pt2 (no retraining).
The planted defect: one BatchNorm channel of conv2 scaled x1000 (undone in the fc weights, so
the float model is unchanged) wrecks per-tensor int8 — the per-layer report must rank the
conv2 layer first.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import tpuedge
from tpuedge.shared_ir.errors import UserError
from tpuedge.quantize.metrics import ErrorAccumulator, compare_output, snr_db

OUTLIER_CHANNEL, OUTLIER_SCALE = 5, 1000.0


# ---- fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eval_npz(digits_model, tmp_path_factory):
    _, _, _, x_test, y_test = digits_model
    path = tmp_path_factory.mktemp("data") / "digits_test.npz"
    np.savez(path, image=x_test, label=y_test)
    return path


@pytest.fixture(scope="module")
def eval_small_npz(digits_model, tmp_path_factory):
    """The first 64 test samples: enough for the checks that don't measure accuracy."""
    _, _, _, x_test, y_test = digits_model
    path = tmp_path_factory.mktemp("data") / "digits_test_64.npz"
    np.savez(path, image=x_test[:64], label=y_test[:64])
    return path


@pytest.fixture(scope="module")
def calibration():
    import model as digits

    return digits.calibration(64)


@pytest.fixture(scope="module")
def android_int8(digits_program, calibration, tmp_path_factory):
    return tpuedge.build(
        digits_program, "android", tmp_path_factory.mktemp("a") / "android", quantize="int8", calibration=calibration
    )


@pytest.fixture(scope="module")
def digits_pt2(digits_program, tmp_path_factory):
    return digits_program.save(tmp_path_factory.mktemp("m") / "digits.pt2")


@pytest.fixture(scope="module")
def outlier_program(digits_model):
    """The digits CNN with one outlier channel after conv2+bn2, same float function."""
    import torch

    net = copy.deepcopy(digits_model[0])
    k, scale = OUTLIER_CHANNEL, OUTLIER_SCALE
    with torch.no_grad():
        net.bn2.weight[k] *= scale
        net.bn2.bias[k] *= scale  # relu and max-pool commute with a positive scale ...
        net.fc.weight[:, k * 16 : (k + 1) * 16] /= scale  # ... which the classifier undoes
    return tpuedge.export(net, (torch.zeros(1, 1, 8, 8),), name="digits_outlier")


@pytest.fixture(scope="module")
def outlier_android(outlier_program, calibration, tmp_path_factory):
    return tpuedge.build(
        outlier_program,
        "android",
        tmp_path_factory.mktemp("o") / "android",
        quantize="int8",
        # broken on purpose, verify must catch it: per-tensor weights, and strict int8 so the search
        # can't rescue the outlier channel with an int16 or float island
        calibration=calibration,
        per_channel=False,
        strict_int8=True,
        allow_below_budget=True,
    )


@pytest.fixture(scope="module")
def cloud_digits(digits_program, tmp_path_factory):
    return tpuedge.build(digits_program, "cloud-tpu", tmp_path_factory.mktemp("c") / "cloud")


def _cli(argv, capsys):
    from tpuedge.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["verify", *map(str, argv)])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


# ---- metrics ---------------------------------------------------------------------------------
def test_output_metrics_on_known_numbers():
    ref = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 0.0]])
    got = ref + np.array([[0.1, -0.1, 0.0], [0.0, 0.0, 3.5]])  # row 2's argmax moves from 0 to 2
    m = compare_output("logits", ref, got)
    assert m.max_abs_error == pytest.approx(3.5)
    assert m.mean_abs_error == pytest.approx(3.7 / 6)
    assert m.snr_db == pytest.approx(10 * np.log10(24.0 / 12.27))
    assert m.top1_agreement == 0.5
    assert compare_output("same", ref, ref).snr_db == 120.0
    assert compare_output("flipped", ref, -ref).cosine == pytest.approx(-1.0)
    assert compare_output("vector", np.ones((4, 1, 3)), np.ones((4, 1, 3))).top1_agreement is None


def test_per_channel_snr_sees_channels_crushed_under_a_loud_one():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(8, 4, 5, 5))
    ref[:, 0] *= 1000.0  # one loud channel
    got = ref.copy()
    got[:, 1:] = 0.0  # the quiet channels lost entirely
    acc = ErrorAccumulator()
    acc.update(ref, got)
    assert acc.snr_db > 50.0  # the whole-tensor SNR barely notices
    assert acc.channel_snr_db == pytest.approx((120.0 + 3 * 0.0) / 4, abs=1e-6)
    assert snr_db(1.0, 0.01) == pytest.approx(20.0)


def test_layer_values_of_another_shape_are_counted_not_dropped():
    from tpuedge.verify.per_layer import accumulate_layers

    rng = np.random.default_rng(1)
    reference = {"conv": rng.normal(size=(1, 4, 3, 3)), "flat": rng.normal(size=(1, 36))}
    got = {"conv": reference["conv"] + 0.01, "flat": reference["flat"].reshape(1, 4, 9), "extra": np.ones(3)}
    accumulators, mismatches = {}, {}
    accumulate_layers(reference, got, accumulators, mismatches)
    assert set(accumulators) == {"conv"}
    assert mismatches == {"flat": "flat: runtime (1, 4, 9) vs IR (1, 36)"}


# ---- data errors (exit 2 material) -----------------------------------------------------------
def test_data_errors_name_the_input_and_the_expected_shape(digits_program, digits_model):
    from tpuedge.verify.data import load_data

    _, _, _, x_test, y_test = digits_model
    with pytest.raises(UserError, match=r"'image' has shape \(360, 8, 8\), expected \(N, 1, 8, 8\)"):
        load_data({"image": x_test[:, 0]}, digits_program.inputs)
    with pytest.raises(UserError, match=r"no array 'answer' for the labels \(it has: image, label\)"):
        load_data({"image": x_test, "label": y_test}, digits_program.inputs, labels="answer")
    with pytest.raises(UserError, match=r"no array for input\(s\) 'image' \(it has: a, b\)"):
        load_data({"a": x_test, "b": x_test}, digits_program.inputs)
    with pytest.raises(UserError, match="labels must be 360 integer class indices"):
        load_data({"image": x_test}, digits_program.inputs, labels=y_test[:10])
    both = load_data({"image": x_test[:, None]}, digits_program.inputs)  # (N, 1, 1, 8, 8): whole calls
    assert both.count == 360 and both.rows[0].shape == (360, 1, 8, 8)


# ---- a good int8 build -----------------------------------------------------------------------
def test_good_int8_build_passes_with_real_numbers(android_int8, digits_program, digits_model):
    _, _, _, x_test, y_test = digits_model
    result = tpuedge.verify(
        android_int8,
        digits_program,
        {"image": x_test, "label": y_test},
        labels="label",
        min_cosine=0.99,
        min_top1=0.97,
        max_drop=1.5,
    )
    assert result.passed and len(result.checks) == 3
    out = result.outputs[0]
    assert result.samples == 360 and out.shape == (360, 10)
    assert out.cosine >= 0.99 and out.snr_db > 15.0 and out.top1_agreement >= 0.97
    assert 0.0 < out.mean_abs_error < out.max_abs_error < 10.0
    assert result.accuracy.float_accuracy >= 95.0
    assert abs(result.accuracy.drop) <= 1.5
    # the numbers are LiteRT's against torch's: recompute them here with the LiteRT interpreter
    # on the .tflite file and the trained torch module, outside verify's code path
    import torch
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(android_int8.directory / "model.tflite"), num_threads=1)
    interpreter.allocate_tensors()
    (inp,), (outp,) = interpreter.get_input_details(), interpreter.get_output_details()
    (in_scale, in_zero), (out_scale, out_zero) = inp["quantization"], outp["quantization"]
    litert = []
    for x in x_test:
        x = x[None].transpose(0, 2, 3, 1).reshape(inp["shape"]) if tuple(inp["shape"]) == (1, 8, 8, 1) else x[None]
        if inp["dtype"] != np.float32:
            x = np.clip(np.round(x / in_scale) + in_zero, -128, 127)
        interpreter.set_tensor(inp["index"], x.astype(inp["dtype"]))
        interpreter.invoke()
        y = interpreter.get_tensor(outp["index"]).astype(np.float64)
        litert.append((y - out_zero) * out_scale if outp["dtype"] != np.float32 else y)
    litert = np.concatenate(litert)
    with torch.no_grad():
        torch_logits = digits_model[0](torch.from_numpy(x_test)).numpy().astype(np.float64)
    error = np.abs(litert - torch_logits)
    assert (out.max_abs_error, out.mean_abs_error) == pytest.approx((error.max(), error.mean()), rel=1e-4)
    expected_cosine = np.sum(litert * torch_logits) / np.sqrt(np.sum(litert**2) * np.sum(torch_logits**2))
    assert out.cosine == pytest.approx(expected_cosine, abs=1e-6)
    assert out.top1_agreement == np.mean(litert.argmax(1) == torch_logits.argmax(1))
    assert result.accuracy.runtime_accuracy == pytest.approx(100 * np.mean(litert.argmax(1) == y_test))


def test_build_manifest_and_verify_report_the_same_numbers(android_int8, digits_program, calibration):
    """One metrics module: verify on the samples the build measured gives the manifest's numbers."""
    measured = android_int8.manifest["accuracy"]
    # 64 calibration samples: the build calibrates on the first 48 and measures on the last 16
    assert measured["inputs"] == "held out from calibration" and measured["samples"] == 16
    images = np.concatenate([sample[0] for sample in calibration[-16:]])
    out = tpuedge.verify(android_int8, digits_program, images).outputs[0]
    for name in ("cosine", "centered_cosine", "max_abs_error", "top1_agreement"):
        # 7 digits in the manifest; torch's CPU conv kernels were measured to differ by ~2e-6 between
        # two buffers holding the same image (alignment), so max_abs_error gets that much room
        assert measured[name] == pytest.approx(getattr(out, name), abs=2e-6), name


def test_cli_exit_0_then_exit_1_with_the_failing_check_named(
    android_int8, digits_pt2, eval_npz, eval_small_npz, tmp_path, capsys
):
    code, out, _ = _cli(
        [
            android_int8.directory,
            "--model",
            digits_pt2,
            "--data",
            eval_npz,
            "--labels",
            "label",
            "--min-cosine",
            "0.99",
            "--max-drop",
            "1.5",
        ],
        capsys,
    )
    assert code == 0, out
    assert "verify passed: 2 check(s)" in out and "max abs err" in out

    report = tmp_path / "verify.json"
    code, out, _ = _cli(
        [
            android_int8.directory,
            "--model",
            digits_pt2,
            "--data",
            eval_small_npz,
            "--labels",
            "label",
            "--min-cosine",
            "1.0",
            "--min-top1",
            "0.5",
            "--json",
            report,
        ],
        capsys,
    )
    assert code == 1
    assert "FAIL cosine of output" in out and "< required 1" in out
    assert "pass top-1 agreement of output" in out
    for column in ("output", "max abs err", "mean abs err", "cosine", "SNR dB", "top-1 agree"):
        assert column in out
    payload = json.loads(report.read_text())
    assert payload["passed"] is False
    (result,) = payload["results"]
    assert [c["name"] for c in result["checks"] if not c["passed"]] == ["cosine"]
    assert result["failures"][0].startswith("cosine of output")
    assert 0.99 <= result["outputs"][0]["cosine"] < 1.0
    assert result["accuracy"]["float_accuracy"] >= 95.0


def test_cli_exit_2_for_bad_input(android_int8, digits_pt2, outlier_program, eval_npz, tmp_path, capsys, digits_model):
    other = outlier_program.save(tmp_path / "other.pt2")
    code, _, err = _cli([android_int8.directory, "--model", other, "--data", eval_npz], capsys)
    assert code == 2 and "built from a different IR" in err and outlier_program.fingerprint[:12] in err

    flat = tmp_path / "flat.npz"
    np.savez(flat, image=digits_model[3][:, 0])
    code, _, err = _cli([android_int8.directory, "--model", digits_pt2, "--data", flat], capsys)
    assert code == 2 and "expected (N, 1, 8, 8)" in err

    code, _, err = _cli([android_int8.directory, "--model", digits_pt2, "--data", eval_npz, "--max-drop", "1"], capsys)
    assert code == 2 and "needs labels" in err

    code, _, err = _cli(
        [android_int8.directory, "--model", digits_pt2, "--data", eval_npz, "--labels", "answer"], capsys
    )
    assert code == 2 and "no array 'answer' for the labels (it has: image, label)" in err

    code, _, err = _cli([android_int8.directory, "--model", digits_pt2, "--data", tmp_path / "missing.npz"], capsys)
    assert code == 2 and "does not exist" in err


def test_verify_without_thresholds_still_checks_the_default_cosine(outlier_android, outlier_program, digits_model):
    from tpuedge.verify import DEFAULT_MIN_COSINE

    _, _, _, x_test, _ = digits_model
    result = tpuedge.verify(outlier_android, outlier_program, x_test[:64])  # no threshold given
    assert DEFAULT_MIN_COSINE == 0.99
    assert [(c.name, c.limit) for c in result.checks] == [("cosine", 0.99)]
    assert result.outputs[0].cosine < 0.99 and not result.passed  # the broken build does not pass
    off = tpuedge.verify(outlier_android, outlier_program, x_test[:64], min_cosine=-1.0)
    assert off.checks == [] and not off.passed  # nothing checked is not a pass


def test_cli_states_the_default_threshold_and_fails_when_nothing_is_checked(
    outlier_android, outlier_program, eval_small_npz, tmp_path, capsys
):
    from click.testing import CliRunner

    from tpuedge.verify.command import verify_command

    help_text = " ".join(CliRunner().invoke(verify_command, ["--help"]).output.split())
    assert "--min-cosine FLOAT" in help_text and "[default: 0.99]" in help_text
    pt2 = outlier_program.save(tmp_path / "outlier.pt2")
    code, out, _ = _cli([outlier_android.directory, "--model", pt2, "--data", eval_small_npz], capsys)
    assert code == 1 and "FAIL cosine of output" in out and "required 0.99" in out
    code, out, _ = _cli(
        [outlier_android.directory, "--model", pt2, "--data", eval_small_npz, "--min-cosine", "-1"], capsys
    )
    assert code == 1 and "verify checked nothing" in out


# ---- per-layer: the planted defect -----------------------------------------------------------
def test_per_layer_ranks_the_planted_outlier_layer_first(outlier_android, outlier_program, digits_model, tmp_path):
    _, _, _, x_test, y_test = digits_model
    result = tpuedge.verify(
        outlier_android,
        outlier_program,
        {"image": x_test, "label": y_test},
        labels="label",
        min_cosine=0.99,
        per_layer=True,
        layer_samples=32,
    )
    assert not result.passed  # per-tensor int8 can't hold one channel 1000x louder than the rest
    assert result.accuracy.drop > 20.0
    ranked = result.layers.ranked()
    worst = ranked[0]
    assert worst.node == "relu_1" and "conv2" in worst.label and "bn2" in worst.label
    assert "self.conv2" in worst.source
    assert worst.drop_db > 20.0 and worst.drop_db > 2 * ranked[1].drop_db
    # the whole-tensor SNR hides it (the loud channel survives); the per-channel SNR doesn't
    assert worst.tensor_snr_db > worst.snr_db + 10.0

    from tpuedge.verify.report import PLOT_FILE, REPORT_FILE, write_report_dir

    out = write_report_dir(tmp_path / "report", [result])
    md = (out / REPORT_FILE).read_text()
    first_row = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    assert "relu_1 (conv2 → bn2 → relu)" in first_row
    png = (out / PLOT_FILE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_per_layer_on_a_good_build_has_no_outlier(android_int8, digits_program, digits_model):
    _, _, _, x_test, _ = digits_model
    result = tpuedge.verify(android_int8, digits_program, x_test, per_layer=True, layer_samples=16)
    layers = {l.node: l for l in result.layers.layers}
    # conv1+bn1+relu, conv2+bn2+relu, pool, flatten and fc are all found in the flatbuffer
    assert {"image", "relu", "relu_1", "max_pool2d", "flatten", "linear"} <= set(layers)
    assert all(l.snr_db > 25.0 for l in layers.values())
    assert max(l.drop_db for l in result.layers.ranked()) < 20.0


# ---- across runtimes -------------------------------------------------------------------------
def test_cli_per_layer_across_android_mcu_and_cloud(
    cloud_digits, android_int8, digits_program, digits_pt2, eval_small_npz, calibration, tmp_path_factory, capsys
):
    root = tmp_path_factory.mktemp("runtimes")
    mcu = tpuedge.build(digits_program, "mcu", root / "mcu", calibration=calibration, eval="none")
    cloud = cloud_digits
    report = root / "report"
    code, out, _ = _cli(
        [
            android_int8.directory,
            mcu.directory,
            cloud.directory,
            "--model",
            digits_pt2,
            "--data",
            eval_small_npz,
            "--labels",
            "label",
            "--min-top1",
            "0.97",
            "--per-layer",
            "--report-dir",
            report,
            "--layer-samples",
            "8",
            "--json",
            root / "v.json",
        ],
        capsys,
    )
    assert code == 0, out
    for runtime in ("LiteRT (android)", "TFLite-Micro (mcu)", "XLA CPU (cloud-tpu)"):
        assert f"worst layers in {runtime}" in out
    payload = json.loads((root / "v.json").read_text())
    by_target = {r["target"]: r for r in payload["results"]}
    cloud_out = by_target["cloud-tpu"]["outputs"][0]
    assert cloud_out["max_abs_error"] < 1e-3 and cloud_out["cosine"] > 0.999999
    # TFLM and LiteRT run the same int8 math: within a few LSB of each other
    assert abs(by_target["mcu"]["outputs"][0]["cosine"] - by_target["android"]["outputs"][0]["cosine"]) < 0.01
    cloud_layers = by_target["cloud-tpu"]["layers"]["layers"]
    assert (
        by_target["cloud-tpu"]["layers"]["counterparts"] == by_target["cloud-tpu"]["layers"]["ir_layers"]
    )  # all, by name
    assert len(cloud_layers) == 9 and min(l["snr_db"] for l in cloud_layers) > 90.0
    md = (report / "report.md").read_text()
    assert md.count("### ") == 3 and "![SNR per layer](snr_per_layer.png)" in md
    assert (report / "snr_per_layer.png").stat().st_size > 10_000


def test_cloud_per_layer_runs_the_artifact_so_changed_weights_show_where_they_act(
    cloud_digits, digits_program, digits_model, tmp_path
):
    """Per-layer verify of cloud-tpu reads the artifact's exported layers with its safetensors
    weights: conv2's filters changed in the file (as a weights swap after the build would) shows
    up at conv2 and after it, and nowhere before."""
    import shutil

    from tpuedge.cloud.artifact import WEIGHTS_FILE
    from tpuedge.cloud.safetensors_file import read_safetensors, write_safetensors
    from tpuedge.shared_ir.artifact import file_entry

    changed = tmp_path / "cloud"
    shutil.copytree(cloud_digits.directory, changed)
    weights = {name: np.array(value) for name, value in read_safetensors(changed / WEIGHTS_FILE).items()}
    weights["conv2.weight"] *= 1.5  # every conv2 output 1.5x: SNR 20*log10(1/0.5) = 6 dB
    write_safetensors(changed / WEIGHTS_FILE, weights)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["files"][WEIGHTS_FILE] = file_entry(changed / WEIGHTS_FILE)  # a deliberate, recorded swap
    (changed / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    x = digits_model[3][:16]
    result = tpuedge.verify(changed, digits_program, x, per_layer=True, layer_samples=8)
    layers = {l.node: l for l in result.layers.layers}
    assert layers["conv2d"].snr_db > 90.0 and layers["relu"].snr_db > 90.0  # before conv2: untouched
    assert layers["conv2d_1"].snr_db == pytest.approx(6.0, abs=0.2)  # conv2 onwards: changed (bias kept)
    assert layers["linear"].snr_db < 30.0
    assert result.layers.ranked()[0].node == "conv2d_1"
    assert all(l.tensor.startswith("model.layers.jaxexport:") for l in result.layers.layers if not l.is_input)
    # the unchanged build compares exactly, on every layer the IR has
    clean = tpuedge.verify(cloud_digits, digits_program, x, per_layer=True, layer_samples=8)
    assert min(l.snr_db for l in clean.layers.layers) > 90.0
    assert sum(not l.is_input for l in clean.layers.layers) == clean.layers.ir_layers


def test_per_layer_reaches_inside_a_bert_encoder(tmp_path):
    """A BERT-style encoder (HF BertModel, small random config, token ids + mask): per-layer
    verify compares most IR nodes that have a counterpart tensor in the flatbuffer, inside the
    encoder too, not only the few next to the outputs."""
    import torch
    from transformers import BertConfig, BertModel

    from tpuedge.shared_ir.ir_values import ir_layers
    from tpuedge.edge.intermediates.tflite_graph import counterpart_nodes, read_graph

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
    )

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(config).eval()

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids, mask = torch.randint(0, 100, (1, 16)), torch.ones(1, 16, dtype=torch.long)
    program = tpuedge.export(Encoder().eval(), (ids, mask), name="bert_tiny")
    artifact = tpuedge.build(program, "android", tmp_path / "android", quantize="none")
    rng = np.random.default_rng(0)
    mask = np.ones((4, 16), np.int64)
    mask[:, 12:] = 0  # padded sentences: masked logits meet finfo.min in the IR, a bound in the flatbuffer
    data = {"input_ids": rng.integers(0, 100, (4, 16)), "attention_mask": mask}
    result = tpuedge.verify(artifact, program, data, per_layer=True, layer_samples=4)
    compared = {l.node for l in result.layers.layers if not l.is_input}
    layers = ir_layers(program)
    counterparts = counterpart_nodes(read_graph((artifact.directory / "model.tflite").read_bytes()), program, layers)
    coverage = len(compared & counterparts) / len(counterparts)
    assert result.layers.counterparts == len(counterparts | compared) and compared <= counterparts
    # measured 48 of 60 (43 before heads-layout transposes, folded attention scales and
    # value-moving ties were matched; 3 before that)
    assert coverage >= 0.8, (coverage, " ".join(sorted(counterparts - compared)))
    by_op = {}
    for layer in result.layers.layers:
        by_op.setdefault(layers[layer.node].op, []).append(layer)
    # inside the encoder, and exact where the converter keeps the value (a float build)
    assert len(by_op["aten.layer_norm.default"]) == 5 and len(by_op["aten.gelu.default"]) == 2
    assert min(l.snr_db for op in ("aten.layer_norm.default", "aten.gelu.default") for l in by_op[op]) > 60.0
    # the query/key projections hold the converter's folded 1/sqrt(d) share: divided out, they
    # compare exactly too (old code: 6 dB, a drop the float build does not have)
    attention = by_op["aten.linear.default"] + by_op["aten.scaled_dot_product_attention.default"]
    assert len(by_op["aten.scaled_dot_product_attention.default"]) == 2
    assert min(l.snr_db for l in attention) > 60.0
    # a float build compares exactly everywhere (old code: the masked logits read as 0 dB)
    assert min(l.snr_db for l in result.layers.layers) > 60.0, [l.node for l in result.layers.layers if l.snr_db <= 60]
