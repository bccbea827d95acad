"""The build cache in real builds: hits give the same bytes as cold builds, android and mcu share
the float model, damaged entries are rebuilt, and two processes can fill one cache at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run_cli
from tpuedge.edge.litert.float_model import clear_float_cache
from tpuedge.shared_ir.cache import BuildCache
from tpuedge.shared_ir.cache_keys import read_cache_line

ROOT = Path(__file__).resolve().parents[1]
MODEL = f"{ROOT}/examples/models.py:build_cnn"


@pytest.fixture(scope="module")
def calibration_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "cal.npz"
    np.savez(path, x=np.random.default_rng(0).standard_normal((16, 1, 3, 32, 32)).astype(np.float32))
    return path


def _build(out: Path, *args: str, model: str = MODEL) -> str:
    clear_float_cache()  # each build as a fresh process would see it: nothing converted in memory
    code, stdout, stderr = run_cli("build", model, "--out", str(out), *args)
    assert code == 0, stderr
    return stdout


def _folder(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _cache_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("cache:"))


def _outcomes(stdout: str) -> dict[str, list[str]]:
    return read_cache_line(_cache_line(stdout))


def test_android_int8_rebuild_hits_every_stage_with_identical_bytes(tmp_path, cache_dir, calibration_file):
    args = ("--target", "android", "--quantize", "int8", "--calibration", str(calibration_file))
    cold = _outcomes(_build(tmp_path / "cold", *args))
    assert list(cold) == ["miss"] and cold["miss"][:3] == ["check", "float_tflite", "calibration"]
    assert cold["miss"][3].startswith("quant_candidate")  # each recipe the search measured
    warm = _outcomes(_build(tmp_path / "warm", *args))
    assert list(warm) == ["hit"] and warm["hit"] == cold["miss"]  # every candidate of the search, too
    uncached = _cache_line(_build(tmp_path / "off", *args, "--no-cache"))
    assert uncached == "cache: off (--no-cache or TPUEDGE_NO_CACHE)"
    assert _folder(tmp_path / "cold") == _folder(tmp_path / "warm") == _folder(tmp_path / "off")
    code, out, _ = run_cli("cache", "info")
    assert code == 0 and str(cache_dir) in out and "float_tflite: 1 entry" in out and "quant_candidate" in out
    code, out, _ = run_cli("cache", "clear")
    assert code == 0 and "removed" in out and BuildCache(cache_dir).info().entries == 0


@pytest.mark.parametrize(
    "model, android_layout",
    [(MODEL, ("--channels-last",)), (f"{ROOT}/examples/models.py:build_mlp", ())],
    ids=["image-nhwc", "no-image-input"],
)
def test_mcu_build_reuses_the_android_float_model(tmp_path, cache_dir, model, android_layout):
    """mcu builds take NHWC image inputs: they share android's float model when it is NHWC too,
    and always for a model without image inputs (the layout flag changes nothing there)."""
    _assert_mcu_reuses_android_float_model(tmp_path, model, android_layout)


_CNN_MCU_REWRITES = """
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PReLU(8), nn.MaxPool2d(2), nn.Dropout(0.2),
                        nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    return net.eval(), (torch.zeros(1, 3, 16, 16),)
"""

# what torchvision's and timm's CNNs are written with: in-place ReLUs, a residual `out += x`,
# F.pad, SiLU, an ATen alias (torch.multiply)
_CNN_CANONICAL_FORMS = """
import torch
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.act = nn.SiLU()
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.relu(self.stem(x))
        out = self.relu(self.conv(x))
        out += x
        out = F.pad(out, (1, 1, 1, 1))
        out = torch.multiply(self.act(out), 0.5)
        return self.head(out.mean((2, 3)))


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.zeros(1, 3, 16, 16),)
"""


# a block pinned to float32 by `autocast(enabled=False)` (timm's EfficientViT attention) and one
# under no_grad (HF's sinusoidal position embeddings): torch.export keeps each as one call
_CNN_REGIONS = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.conv(x)
        with torch.autocast("cpu", enabled=False):
            x = torch.relu(x) * 2.0
        with torch.no_grad():
            scale = torch.sigmoid(x.mean((2, 3)))
        return self.head(x.mean((2, 3)) * scale)


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.zeros(1, 3, 16, 16),)
"""


@pytest.mark.parametrize(
    "source",
    [_CNN_MCU_REWRITES, _CNN_CANONICAL_FORMS, _CNN_REGIONS],
    ids=["prelu-dropout-flatten", "in-place-pad-silu-alias", "autocast-no-grad-regions"],
)
def test_mcu_rewrites_that_android_lowers_alike_keep_the_float_model_shared(tmp_path, cache_dir, source):
    """mcu's own passes rewrite these CNNs (dropout removed, PReLU's form, the flatten into the
    Linear read in NHWC order; in-place ops out of place, the pad's mode explicit, SiLU as
    x * sigmoid(x), an alias as its op); android's LiteRT lowering applies the same ones, so the
    two targets still give litert-torch one program and share its float model. Before android ran
    the second model's forms, its mcu build missed the float model (ResNet-18, MobileNetV2 too);
    before android inlined the third's regions, that one did (timm's EfficientViT-B0 too)."""
    (tmp_path / "cnn.py").write_text(source)
    _assert_mcu_reuses_android_float_model(tmp_path, f"{tmp_path}/cnn.py:build", ("--channels-last",))


def _assert_mcu_reuses_android_float_model(tmp_path, model: str, android_layout: tuple[str, ...]) -> None:
    import tpuedge.shared_ir.model_spec as model_spec

    program = model_spec.load_program(model)
    cal = tmp_path / "cal.npz"
    rng = np.random.default_rng(0)
    np.savez(cal, **{s.name: rng.standard_normal((16, *s.shape)).astype(np.float32) for s in program.inputs})
    _build(tmp_path / "android", "--target", "android", "--quantize", "none", *android_layout, model=model)
    mcu_args = ("--target", "mcu", "--calibration", str(cal), "--eval", "none")
    mcu = _outcomes(_build(tmp_path / "mcu", *mcu_args, model=model))
    assert mcu["hit"] == ["float_tflite"] and mcu["miss"][:2] == ["check", "calibration"]
    os.environ["TPUEDGE_CACHE_DIR"] = str(tmp_path / "other-cache")  # restored by monkeypatch
    _build(tmp_path / "mcu-cold", *mcu_args, model=model)
    assert _folder(tmp_path / "mcu") == _folder(tmp_path / "mcu-cold")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_entry_is_rebuilt_not_served(tmp_path, cache_dir, damage):
    args = ("--target", "android", "--quantize", "none")
    _build(tmp_path / "cold", *args)
    store = BuildCache(cache_dir)
    (entry,) = [p for p in cache_dir.rglob("*.entry") if store.stage_of(p) == "float_tflite"]
    raw = entry.read_bytes()
    entry.write_bytes(raw[: len(raw) // 2] if damage == "truncate" else raw[:-10] + bytes([raw[-10] ^ 0x40]) + raw[-9:])
    assert _outcomes(_build(tmp_path / "again", *args)) == {"hit": ["check"], "rebuilt": ["float_tflite"]}
    assert _folder(tmp_path / "cold") == _folder(tmp_path / "again")
    assert entry.read_bytes() == raw  # written again, intact
    assert _outcomes(_build(tmp_path / "third", *args)) == {"hit": ["check", "float_tflite"]}


def test_two_processes_fill_one_cache_at_once(tmp_path, cache_dir, calibration_file):
    env = {**os.environ, "TPUEDGE_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "tpuedge.cli",
        "build",
        MODEL,
        "--target",
        "android",
        "--quantize",
        "int8",
        "--calibration",
        str(calibration_file),
    ]
    procs = [
        subprocess.Popen(
            [*command, "--out", str(tmp_path / f"out{i}")],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [r[1][-2000:] for r in results]
    assert _folder(tmp_path / "out0") == _folder(tmp_path / "out1")
    store = BuildCache(cache_dir)
    entries = list(cache_dir.rglob("*.entry"))
    assert entries and all(store.lookup(p.stem)[1] == "hit" for p in entries)
    assert not [p for p in cache_dir.rglob(".*") if p.is_file()]  # no temp file left behind
    # and a third build is served entirely from what the two wrote
    third = _outcomes(
        _build(tmp_path / "out2", "--target", "android", "--quantize", "int8", "--calibration", str(calibration_file))
    )
    assert list(third) == ["hit"] and "float_tflite" in third["hit"]
    assert _folder(tmp_path / "out0") == _folder(tmp_path / "out2")


def test_cloud_rebuild_reuses_the_export_blob_and_the_tpu_compile(tmp_path, cache_dir):
    from tpuedge.cloud.tpu_compile import libtpu_unavailable_reason

    args = ("--target", "cloud-tpu", "--topology", "v5e:2x2")
    cold = _outcomes(_build(tmp_path / "cold", *args))
    warm = _outcomes(_build(tmp_path / "warm", *args))
    stages = {"jax_export"} if libtpu_unavailable_reason() else {"jax_export", "tpu_compile"}
    assert list(cold) == ["miss"] and stages <= set(cold["miss"]) and warm == {"hit": cold["miss"]}, (cold, warm)
    # a hit gives the bytes of the build that made it
    assert _folder(tmp_path / "cold") == _folder(tmp_path / "warm")
    other = _outcomes(_build(tmp_path / "v6e", "--target", "cloud-tpu", "--topology", "v6e:2x2"))
    assert "jax_export" in other["hit"] and (other.get("miss") == ["tpu_compile"] or libtpu_unavailable_reason())
