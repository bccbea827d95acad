"""Buckets of a variable axis (`--buckets input_ids:1=16,32,64`): one signature per size in one
android .tflite, each weight stored once, every bucket held to the cosine budget."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_runner import run_cli

import tpuedge
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.buckets import export_buckets, parse_buckets

ENCODER = """
import torch


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(1000, 128)
        self.layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(128, 8)

    def forward(self, input_ids, attention_mask):
        hidden = self.layer(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)
        weights = attention_mask[..., None].float()
        return self.head((hidden * weights).sum(1) / weights.sum(1))


def build():
    ids = torch.randint(1, 1000, (1, 12), generator=torch.Generator().manual_seed(0))
    return Encoder().eval(), (ids, torch.ones(1, 12, dtype=torch.long))
"""


@pytest.fixture(scope="module")
def encoder_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("encoder") / "encoder.py"
    path.write_text(ENCODER)
    return path


def test_parse_buckets_names_the_form_it_takes():
    assert parse_buckets("input_ids:1=64,16,32") == ("input_ids", 1, (16, 32, 64))
    for bad in ("input_ids=16", "input_ids:1=", "input_ids:x=16", "input_ids:1=0,4"):
        with pytest.raises(UserError, match="INPUT:AXIS=SIZES"):
            parse_buckets(bad)


def test_every_bucket_resizes_the_inputs_along_the_axis_and_shares_the_weights(encoder_file):
    import importlib.util

    spec = importlib.util.spec_from_file_location("encoder_fixture", encoder_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, example = module.build()
    bundle = export_buckets(model, example, "input_ids:1=8,16,32")
    assert bundle.entry_names == ["input_ids_8", "input_ids_16", "input_ids_32"]
    assert bundle.buckets["inputs_resized"] == ["input_ids", "attention_mask"]
    assert [s.shape for s in bundle.entries["input_ids_16"].inputs] == [(1, 16), (1, 16)]
    ids = torch.randint(1, 100, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(ids, torch.ones(1, 16, dtype=torch.long)).numpy()
    got = bundle.entries["input_ids_16"].run(ids.numpy(), np.ones((1, 16), np.int64))[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    with pytest.raises(UserError, match="takes input_ids, attention_mask"):
        export_buckets(model, example, "tokens:1=8")


def test_android_build_has_a_signature_per_bucket_and_each_weight_once(encoder_file, tmp_path):
    out = tmp_path / "android"
    code, stdout, err = run_cli(
        "build",
        f"{encoder_file}:build",
        "--target",
        "android",
        "--buckets",
        "input_ids:1=8,16,32",
        "--quantize",
        "none",
        "--out",
        str(out),
    )
    assert code == 0, err
    from ai_edge_litert.interpreter import Interpreter

    assert list(Interpreter(model_path=str(out / "model.tflite")).get_signature_list()) == [
        "input_ids_8",
        "input_ids_16",
        "input_ids_32",
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    weight_bytes = 4 * manifest["sizes"]["parameter_count"]
    assert weight_bytes < manifest["sizes"]["tflite_bytes"] < 1.5 * weight_bytes  # not three copies
    assert all(entry["met"] for entry in manifest["accuracy_budget"].values())
    artifact = tpuedge.load(out)
    ids = np.random.default_rng(0).integers(1, 100, (1, 16))
    program_out = tpuedge.load(out)  # the same folder, opened again: its model runs per bucket
    got = artifact.run(ids, np.ones((1, 16), np.int64))[0]
    assert got.shape == (1, 8) and np.isfinite(got).all() and program_out is not artifact
    with pytest.raises(UserError, match="built for 8, 16, 32"):
        artifact.run(np.ones((1, 12), np.int64), np.ones((1, 12), np.int64))


def test_auto_in_buckets_keeps_the_smallest_scheme_meeting_the_budget(encoder_file, tmp_path):
    from tpuedge.shared_ir.model_spec import load_program

    bundle = load_program(f"{encoder_file}:build", {"buckets": "input_ids:1=8,16,32"})  # the float model is cached
    artifact = tpuedge.build(bundle, "android", tmp_path / "auto", quantize="auto")
    tried = artifact.manifest["recipe"]["tried"]
    assert tried[0]["scheme"] == "dynamic-int8" and tried[-1]["passed"]
    assert artifact.manifest["recipe"]["scheme"] == tried[-1]["scheme"]
    with pytest.raises(UserError, match="not offered for a model built in buckets"):
        tpuedge.build(bundle, "android", tmp_path / "int8", quantize="int8")
