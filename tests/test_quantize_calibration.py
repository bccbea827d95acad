"""quantize/: QuantConfig validation, calibration loading and every calibration error path,
accuracy metrics, and the per-op precision search (with a synthetic measured model)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.quantize import QuantConfig
from tpuedge.quantize.calibration import load_calibration
from tpuedge.quantize.metrics import compare_outputs
from tpuedge.quantize.recipes import SensitiveGroup, choose_precisions
from tpuedge.shared_ir.errors import UserError


class TwoInputs(torch.nn.Module):
    def forward(self, image, features):
        return image.mean(dim=(1, 2, 3)) + features.sum(-1)


@pytest.fixture(scope="module")
def two_input_program():
    return tpuedge.export(TwoInputs(), (torch.zeros(1, 3, 8, 8), torch.zeros(1, 5)), name="two")


@pytest.fixture(scope="module")
def single_program():
    return tpuedge.export(torch.nn.Linear(4, 2), (torch.zeros(2, 4),), name="lin")


def test_config_is_frozen_and_validated():
    cfg = QuantConfig(scheme="int8", io_dtype="int8", strict_int8=True, per_channel=False, channels_last=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.scheme = "none"  # type: ignore[misc]
    assert cfg.needs_calibration and cfg.granularity == "per-tensor"
    assert QuantConfig().scheme == "auto" and not QuantConfig().needs_calibration and QuantConfig().uses_calibration
    assert QuantConfig(io_dtype="int8").needs_calibration and QuantConfig(strict_int8=True).integer_only
    for bad in (
        dict(scheme="int4"),
        dict(io_dtype="uint8"),
        dict(scheme="fp16", io_dtype="int8"),
        dict(scheme="none", io_dtype="integer"),
        dict(scheme="none", strict_int8=True),
    ):
        with pytest.raises(UserError):
            QuantConfig(**bad)


def test_npz_keyed_by_input_name(tmp_path, two_input_program):
    rng = np.random.default_rng(0)
    path = tmp_path / "cal.npz"
    np.savez(path, image=rng.standard_normal((10, 3, 8, 8)).astype(np.float32), features=rng.standard_normal((10, 5)))
    samples = load_calibration(str(path), two_input_program)
    assert len(samples) == 10
    assert [s.shape for s in samples[0]] == [(1, 3, 8, 8), (1, 5)]
    assert samples[0][1].dtype == np.float32  # float64 cast to the input dtype


def test_npy_folder_function_and_objects(tmp_path, single_program):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((12, 2, 4)).astype(np.float32)
    np.save(tmp_path / "a.npy", data[:6])
    np.save(tmp_path / "b.npy", data[6:])
    from_dir = load_calibration(str(tmp_path), single_program)
    assert len(from_dir) == 12 and np.array_equal(from_dir[7][0], data[7])
    # [N * batch, ...] is split into batches of the input's batch size (2)
    assert len(load_calibration(data.reshape(24, 4), single_program)) == 12
    assert len(load_calibration({single_program.input_names[0]: data}, single_program)) == 12
    module = tmp_path / "calib_src.py"
    module.write_text(
        "import numpy as np\ndef samples():\n    return [(np.ones((2, 4), np.float32) * i,) for i in range(9)]\n"
    )
    from_fn = load_calibration(f"{module}:samples", single_program)
    assert len(from_fn) == 9 and from_fn[3][0][0, 0] == 3.0
    assert len(load_calibration([d for d in data], single_program)) == 12


@pytest.mark.parametrize(
    "case, needle",
    [
        ("wrong_shape", "is [1, 3, 8, 8]"),
        ("wrong_dtype", "expected float32"),
        ("too_few", "has 3 sample(s) but int8 quantization needs at least 8"),
        ("nan", "NaN/Inf"),
        ("missing_key", "missing: ['features']"),
        ("npy_multi_input", "one .npy array but the model has 2 inputs"),
        ("no_file", "does not exist"),
        ("empty_dir", "holds no .npz or .npy"),
        ("bad_function", "has no attribute"),
        ("ragged_counts", "different sample counts"),
    ],
)
def test_calibration_errors_name_input_and_fix(tmp_path, two_input_program, case, needle):
    rng = np.random.default_rng(2)
    img = rng.standard_normal((10, 3, 8, 8)).astype(np.float32)
    feat = rng.standard_normal((10, 5)).astype(np.float32)
    spec: object
    if case == "wrong_shape":
        spec = {"image": rng.standard_normal((10, 3, 7, 8)).astype(np.float32), "features": feat}
    elif case == "wrong_dtype":
        spec = [(np.zeros((1, 3, 8, 8), np.int32), f[None]) for f in feat]
    elif case == "too_few":
        spec = {"image": img[:3], "features": feat[:3]}
    elif case == "nan":
        img[4, 0, 0, 0] = np.nan
        spec = {"image": img, "features": feat}
    elif case == "missing_key":
        np.savez(tmp_path / "c.npz", image=img)
        spec = str(tmp_path / "c.npz")
    elif case == "npy_multi_input":
        np.save(tmp_path / "c.npy", img)
        spec = str(tmp_path / "c.npy")
    elif case == "no_file":
        spec = str(tmp_path / "nope.npz")
    elif case == "empty_dir":
        (tmp_path / "empty").mkdir()
        spec = str(tmp_path / "empty")
    elif case == "bad_function":
        (tmp_path / "src.py").write_text("x = 1\n")
        spec = f"{tmp_path / 'src.py'}:samples"
    else:
        spec = {"image": img, "features": feat[:7]}
    with pytest.raises(UserError) as info:
        load_calibration(spec, two_input_program)
    message = str(info.value)
    assert needle in message, message
    if case in ("wrong_shape", "wrong_dtype", "nan"):
        assert "'image'" in message


def test_compare_outputs_numbers():
    ref = [[np.array([[1.0, 2.0, 3.0]])], [np.array([[3.0, 2.0, 1.0]])]]
    same = compare_outputs(ref, ref)
    assert same.max_abs_error == 0.0 and same.cosine == pytest.approx(1.0) and same.top1_agreement == 1.0
    constant = [[np.array([[2.0, 2.0, 2.0]])], [np.array([[2.0, 2.0, 2.0]])]]
    ignoring_input = compare_outputs(ref, constant)
    assert ignoring_input.cosine > 0.9  # the trap: plain cosine looks fine
    assert ignoring_input.centered_cosine == pytest.approx(0.0, abs=1e-9)  # centered shows it
    assert ignoring_input.max_abs_error == 1.0 and ignoring_input.output_range == 2.0


def test_precision_search_uses_measurements():
    groups = [
        SensitiveGroup("softmax:a", "softmax"),
        SensitiveGroup("gelu:b", "gelu"),
        SensitiveGroup("layer_norm:c", "layer_norm"),
    ]
    # a synthetic measured model: softmax costs 0.05 in int8 (int16 recovers all), gelu costs
    # 0.02 and only float recovers it, layer_norm costs nothing
    cost = {
        "softmax:a": {"int8": 0.05, "int16": 0.0, "float": 0.0},
        "gelu:b": {"int8": 0.02, "int16": 0.015, "float": 0.0},
        "layer_norm:c": {"int8": 0.0, "int16": 0.0, "float": 0.0},
    }
    calls = []

    def evaluate(assignment):
        calls.append(dict(assignment))
        return 1.0 - sum(cost[g][assignment.get(g, "int8")] for g in cost)

    plan = choose_precisions(groups, evaluate, target_cosine=0.999)  # float islands (android)
    assert plan.assignment == {"softmax:a": "float", "gelu:b": "float", "layer_norm:c": "int8"}
    assert plan.all_int8_cosine == pytest.approx(0.93) and plan.final_cosine == pytest.approx(1.0)
    assert {d.group for d in plan.non_int8} == {"softmax:a", "gelu:b"}
    assert all("cosine" in d.reason for d in plan.decisions)
    integer = choose_precisions(groups, evaluate, upgrade="int16", target_cosine=0.999)  # mcu
    assert integer.assignment == {"softmax:a": "int16", "gelu:b": "int16", "layer_norm:c": "int8"}
    assert integer.final_cosine == pytest.approx(0.985)  # int16 recovers a quarter of gelu's cost
    strict = choose_precisions(groups, evaluate, strict_int8=True)
    assert set(strict.assignment.values()) == {"int8"} and strict.final_cosine == pytest.approx(0.93)
    met = choose_precisions(groups, evaluate, target_cosine=0.9)
    assert set(met.assignment.values()) == {"int8"} and met.evaluations == 1


MLP = f"{__import__('pathlib').Path(__file__).resolve().parents[1] / 'examples' / 'models.py'}:build_mlp"


def _bad_calibration_file(tmp_path, case):
    import zipfile

    good = tmp_path / "good.npz"
    np.savez(good, x=np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32))
    data = good.read_bytes()
    path = tmp_path / ("bad.npy" if case.endswith("_npy") else "bad.npz")
    if case == "corrupt_zip":  # the archive's directory is intact, the member's bytes are not
        damaged = bytearray(data)
        damaged[100:140] = b"\xff" * 40
        path.write_bytes(bytes(damaged))
    elif case == "truncated_zip":
        path.write_bytes(data[: len(data) // 2])
    elif case == "garbage_member":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("x.npy", b"not an array at all " * 4)
    elif case in ("text", "text_npy"):
        path.write_text("x,y\n1.0,2.0\n3.0,4.0\n")
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "npy_named_npz":
        np.save(tmp_path / "a.npy", np.zeros((32, 32), np.float32))
        path.write_bytes((tmp_path / "a.npy").read_bytes())
    elif case == "wrong_key":
        np.savez(path, images=np.zeros((32, 32), np.float32))
    return path


@pytest.mark.parametrize(
    "case, needle",
    [
        ("corrupt_zip", "is not a readable .npz archive: the archive is corrupt or truncated: member 'x'"),
        ("truncated_zip", "is not a readable .npz archive: the archive is corrupt or truncated"),
        ("garbage_member", "its member 'x' is not a .npy array (it is a text file"),
        ("text", "is not a readable .npz archive: it is a text file (it starts with 'x,y')"),
        ("text_npy", "is not a readable .npy array: it is a text file (it starts with 'x,y')"),
        ("empty", "is not a readable .npz archive: it is empty (0 bytes)"),
        ("npy_named_npz", "it is a single .npy array, not an .npz archive (rename it to .npy)"),
        ("wrong_key", "has arrays ['images'] but the model's inputs are ['x'] (missing: ['x']) (unknown: ['images'])"),
    ],
)
def test_bad_calibration_files_are_one_paragraph_exit_2_and_write_nothing(tmp_path, case, needle):
    from cli_runner import run_cli

    path = _bad_calibration_file(tmp_path, case)
    out = tmp_path / "out"
    code, _, err = run_cli(
        "build", MLP, "--target", "android", "--quantize", "int8", "--calibration", str(path), "--out", str(out)
    )
    assert code == 2, err
    assert needle in err, err
    assert "Traceback" not in err and "pickle" not in err and err.count("\n") == 1
    assert str(path) in err
    assert not out.exists()


def test_one_unnamed_array_feeds_a_single_input_model(tmp_path, single_program):
    data = np.random.default_rng(3).standard_normal((10, 2, 4)).astype(np.float32)
    np.savez(tmp_path / "unnamed.npz", data)  # stored as arr_0
    assert len(load_calibration(str(tmp_path / "unnamed.npz"), single_program)) == 10
    np.savez(tmp_path / "named.npz", features=data)
    with pytest.raises(UserError, match=r"unknown: \['features'\].*or save one unnamed array"):
        load_calibration(str(tmp_path / "named.npz"), single_program)


@pytest.mark.parametrize("case", ["text", "text_npy", "truncated_zip", "garbage_member"])
def test_verify_data_files_go_through_the_same_reader(tmp_path, single_program, case):
    """`tpuedge verify --data` reads .npz/.npy with the same checks as --calibration."""
    from tpuedge.verify.data import load_data

    path = _bad_calibration_file(tmp_path, case)
    with pytest.raises(UserError, match=rf"Data file .*{path.name} is not a readable") as info:
        load_data(str(path), single_program.inputs)
    assert "pickle" not in str(info.value)
