"""The shared IR: capture, named I/O, fingerprint, reference run, save/load, check."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import tpuedge
from models import build_cnn, build_lstm, build_mlp, build_transformer
from tpuedge.shared_ir.errors import UserError


def _line_of(snippet: str) -> int:
    import bad_models

    lines = open(bad_models.__file__).read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if snippet in line)


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn, "transformer": build_transformer, "lstm": build_lstm}


@pytest.fixture(scope="module")
def programs():
    out = {}
    for name, build in BUILDERS.items():
        module, inputs = build()
        out[name] = (module, inputs, tpuedge.export(module, inputs, name=name))
    return out


@pytest.mark.parametrize("name", list(BUILDERS))
def test_export_runs_like_eager(programs, name):
    module, inputs, program = programs[name]
    with torch.no_grad():
        expected = module(*inputs)
    (got,) = program.run(*inputs)
    assert got.shape == tuple(expected.shape)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-6, rtol=1e-6)


def test_named_io_shapes_and_params(programs):
    _, _, cnn = programs["cnn"]
    assert [s.name for s in cnn.inputs] == ["x"]
    assert cnn.inputs[0].shape == (1, 3, 32, 32) and cnn.inputs[0].dtype == "float32"
    assert cnn.outputs[0].shape == (1, 10) and cnn.output_names == ["output"]
    module = programs["cnn"][0]
    assert cnn.parameter_count == sum(p.numel() for p in module.parameters())


def test_ir_keeps_ops_whole_for_the_backends(programs):
    """No early decomposition: SDPA, GELU and LayerNorm reach the backends as single ops."""
    hist = programs["transformer"][2].op_histogram
    assert hist["aten.scaled_dot_product_attention.default"] == 1
    assert hist["aten.gelu.default"] == 1
    assert hist["aten.layer_norm.default"] == 2
    assert programs["lstm"][2].op_histogram.get("aten.lstm.input") == 1


def test_output_names_follow_the_forward_signature():
    class Two(torch.nn.Module):
        def forward(self, image, mask):
            return {"logits": image.sum(1), "score": (image * mask).mean()}

    program = tpuedge.export(Two(), (torch.randn(2, 3), torch.ones(2, 3)))
    assert program.input_names == ["image", "mask"]
    assert program.output_names == ["logits", "score"]


def test_fingerprint_changes_with_one_weight_and_one_op():
    module, inputs = build_mlp()
    base = tpuedge.export(module, inputs).fingerprint
    with torch.no_grad():
        module.fc2.weight[3, 7] += 1e-3
    assert tpuedge.export(module, inputs).fingerprint != base

    class Gelu(torch.nn.Module):
        def __init__(self, act):
            super().__init__()
            self.fc, self.act = torch.nn.Linear(4, 4), act

        def forward(self, x):
            return self.act(self.fc(x))

    torch.manual_seed(0)
    relu = Gelu(torch.nn.ReLU())
    torch.manual_seed(0)
    gelu = Gelu(torch.nn.GELU())
    x = (torch.randn(1, 4),)
    assert tpuedge.export(relu, x).fingerprint != tpuedge.export(gelu, x).fingerprint


def test_fingerprint_is_identical_across_processes(programs, repo_root, tmp_path):
    script = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {str(repo_root / "examples")!r})
        import tpuedge
        from models import build_cnn
        m, x = build_cnn()
        print(tpuedge.export(m, x, name="cnn").fingerprint)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == programs["cnn"][2].fingerprint


def test_fingerprint_hashes_weights_without_copying_them():
    """A copy of each weight to hash it stayed in the build's peak memory (DistilBERT: +29 MB)."""
    import tracemalloc

    from tpuedge.shared_ir.fingerprint import fingerprint

    embedding = torch.nn.Embedding(16384, 256)  # 16 MiB of float32 weights
    program = tpuedge.export(embedding, (torch.zeros(1, 4, dtype=torch.long),))
    tracemalloc.start()
    try:
        fingerprint(program.exported_program)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"hashing the weights allocated {peak / 2**20:.1f} MiB at once"


def test_save_load_round_trip(programs, tmp_path):
    _, inputs, program = programs["transformer"]
    path = program.save(tmp_path / "t.pt2")
    loaded = tpuedge.Program.load(path)
    assert loaded.fingerprint == program.fingerprint
    assert loaded.name == "transformer" and loaded.input_names == program.input_names
    np.testing.assert_array_equal(loaded.run(*inputs)[0], program.run(*inputs)[0])
    assert tpuedge.load(path).fingerprint == program.fingerprint


def test_load_rejects_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip archive")
    with pytest.raises(UserError, match="not a readable torch.export"):
        tpuedge.Program.load(bad)
    with pytest.raises(UserError, match="No saved program"):
        tpuedge.Program.load(tmp_path / "missing.pt2")


def test_run_rejects_wrong_input_shape(programs):
    _, _, program = programs["mlp"]
    with pytest.raises(UserError, match=r"input 'x' has shape \[4, 31\], expected \[4, 32\]"):
        program.run(np.zeros((4, 31), np.float32))
    with pytest.raises(UserError, match="takes 1 input"):
        program.run(np.zeros((4, 32), np.float32), np.zeros(1))


def test_check_reports_custom_op_with_source_line():
    from bad_models import custom_op

    program = tpuedge.export(*custom_op())
    problems = program.check("cloud-tpu")
    custom = [p for p in problems if p.subject == "tpuedge_test.mystery.default"]
    assert len(custom) == 1
    assert "custom op" in custom[0].message
    line = _line_of("torch.ops.tpuedge_test.mystery(x)")
    assert any(f"bad_models.py:{line} in forward" in s for s in custom[0].sources), custom[0].sources


def test_check_reports_float64_and_dynamic_dims():
    class Net(torch.nn.Module):
        def forward(self, x):
            return x.double().sum(-1)

    dim = torch.export.Dim("batch", min=2, max=64)
    program = tpuedge.export(Net(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: dim}})
    kinds = {p.kind: p for p in program.check("mcu")}
    assert "float64" in kinds["dtype"].subject and kinds["dtype"].suggestion
    assert "x" in kinds["dynamic-shape"].subject


def test_capture_error_names_the_guard_and_line():
    from bad_models import data_dependent

    with pytest.raises(UserError) as info:
        tpuedge.export(*data_dependent())
    text = str(info.value)
    assert "torch.export could not capture _Branchy" in text
    assert f"bad_models.py:{_line_of('if x.sum() > 0')}" in text and "torch.cond" in text


def test_a_none_or_number_output_is_a_user_error_at_capture():
    """Old code: `return logits, None` captured, then every target stopped inside its backend (an
    internal error from litert-torch's MLIR builder; the cloud backend's AttributeError)."""

    class WithNone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x), None, {"steps": 3, "logits": self.fc(x)}

    with pytest.raises(UserError) as info:
        tpuedge.export(WithNone().eval(), (torch.randn(1, 8),))
    text = str(info.value)
    assert "WithNone.forward" in text and "output 1 is None" in text and "output 2 is 3" in text
    assert "return logits" in text


def test_a_detectors_postprocessing_gets_the_raw_outputs_advice(monkeypatch):
    """torchvision's detectors fail capture in non-maximum suppression, deep in library code: the
    error named no line (every frame a library's) and advised torch.cond; a symbolic expression
    ran to 4,000 characters in its first line."""
    from bad_models import detector

    from tpuedge.shared_ir import sources

    with pytest.raises(UserError) as info:
        tpuedge.export(*detector())
    text = str(info.value)
    assert f"bad_models.py:{_line_of('if kept.numel() > 20')} in batched_nms" in text
    assert "raw box and score outputs" in text and "non-maximum suppression" in text and "torch.cond" not in text
    assert len(text) < 900

    # the model's code all in a library (as torchvision's is, in site-packages): its innermost frame
    monkeypatch.setattr(sources, "_LIBRARY_MARKERS", (*sources._LIBRARY_MARKERS, f"{os.sep}tests{os.sep}"))
    with pytest.raises(UserError) as info:
        tpuedge.export(*detector())
    assert f"bad_models.py:{_line_of('if kept.numel() > 20')} in batched_nms" in str(info.value)


def test_export_restores_training_flags():
    module, inputs = build_cnn()
    module.train()
    module.bn1.eval()
    tpuedge.export(module, inputs)
    assert module.training and not module.bn1.training and module.conv1.training


def test_saved_pt2_is_byte_identical_whatever_the_file_name(programs, tmp_path):
    _, _, program = programs["mlp"]
    first = program.save(tmp_path / "a.pt2").read_bytes()
    assert program.save(tmp_path / "b.pt2").read_bytes() == first
    assert program.save(tmp_path / "a.pt2").read_bytes() == first


def test_load_rejects_a_file_whose_contents_no_longer_match_its_fingerprint(programs, tmp_path):
    import json
    import zipfile

    _, _, program = programs["mlp"]
    good = program.save(tmp_path / "good.pt2")
    tampered = tmp_path / "tampered.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("extra/tpuedge.json"):
                meta = json.loads(data)
                meta["fingerprint"] = "0" * 64
                data = json.dumps(meta).encode()
            dst.writestr(item, data)
    with pytest.raises(UserError, match="modified after it was saved"):
        tpuedge.Program.load(tampered)
