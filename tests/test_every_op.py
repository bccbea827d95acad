"""The int8 search's whole-model rung: where the ranked points and the op groups leave a model
below target, every op at the target's upgrade precision (weights int8) is measured and kept if
better: 16-bit activations on mcu, float compute on android (LiteRT runs int16 on its reference
kernels).

The models here have no op group the search knows (no norm, softmax, attention or recurrence),
and the IR ranking is switched off as it is for a model over its point limit (Resemblyzer's
LSTM over 160 frames): before the rung, nothing the search could change reached the budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.edge.flatbuffer import tflite_file


class _Outliers(torch.nn.Module):
    """Linears with one output channel 400x the others, each into a tanh: int8 spends its 256 steps
    on that channel's range and the rest of the layer rounds to a few steps; the tanh bounds what
    follows, so the model's int8 output (mcu) is not itself the loss."""

    def __init__(self, gather: bool = False):
        super().__init__()
        self.gather = gather
        self.fc1, self.fc2, self.fc3 = (
            torch.nn.Linear(16, 24),
            torch.nn.Linear(48 if gather else 24, 24),
            torch.nn.Linear(24, 16),
        )
        with torch.no_grad():
            self.fc2.weight[0] *= 400.0
            if not gather:
                self.fc1.weight[0] *= 400.0

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.gather:  # each feature twice: one GATHER_ND on mcu, which TFLite-Micro refuses at int16
            h = torch.repeat_interleave(h, 2, dim=-1)
        return self.fc3(torch.tanh(self.fc2(h)))


def _program_and_samples(gather: bool):
    torch.manual_seed(0)
    program = tpuedge.export(_Outliers(gather).eval(), (torch.zeros(1, 16),), name="outliers")
    rng = np.random.default_rng(0)
    return program, [(rng.standard_normal((1, 16)).astype(np.float32),) for _ in range(32)]


def _dtypes(path) -> set[str]:
    model = tflite_file.read_model(path.read_bytes())
    return {tflite_file.dtype_name(t.type) for t in model.subgraphs[0].tensors}


def test_every_op_in_float_on_android_where_no_group_reaches_the_budget(tmp_path, monkeypatch):
    """Old code: every activation at 16 bits here, run by LiteRT's reference kernels."""
    from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite

    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    program, calibration = _program_and_samples(gather=False)
    art = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    recipe = art.manifest["recipe"]
    rung = recipe["every_op"]
    assert rung["kept"] and rung["precision"] == "float" and rung["tried"][0]["score"] > rung["start_score"]
    assert [(o["group"], o["precision"]) for o in recipe["non_int8_ops"]] == [("every_op", "float")]
    assert art.manifest["accuracy_budget"]["met"]  # on the 8 samples calibration did not see
    assert min(art.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"]) >= 0.99
    model = tmp_path / "int8" / "model.tflite"
    assert "int16" not in _dtypes(model)
    summary = summarize_tflite(model.read_bytes())
    assert (
        summary.float_ops.get("FULLY_CONNECTED") == 3 and summary.weight_dtypes["int8"] >= 16 * 24 + 24 * 24 + 24 * 16
    )


def test_an_op_type_the_board_refuses_at_16_bits_stays_int8(tmp_path, monkeypatch):
    """TFLite-Micro has no int16 GATHER_ND: the every-op candidate is refused, the op type named in
    the refusal is left int8 and the rest measured again."""
    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    program, calibration = _program_and_samples(gather=True)
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    rung = art.manifest["quantization"]["recipe"]["every_op"]
    assert rung["precision"] == "int16"  # TFLite-Micro runs only integer graphs
    first, second = rung["tried"][:2]
    assert "GATHER_ND" in first["refused"] and second["left_int8"] == ["GATHER_ND"] and "refused" not in second
    assert rung["kept"]
    held_out = art.manifest["verification"]["held_out"]
    assert held_out["tflm_vs_float"]["sample_cosine"] >= 0.99
    assert "int16" in _dtypes(tmp_path / "mcu" / "model.tflite")


def test_the_rung_is_not_measured_where_the_search_reached_its_target(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(
        torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval(),
        (torch.zeros(1, 16),),
        name="plain",
    )
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((1, 16)).astype(np.float32),) for _ in range(16)]
    art = tpuedge.build(program, "android", tmp_path / "plain", quantize="int8", calibration=calibration)
    assert art.manifest["recipe"]["every_op"] is None
    assert "int16" not in _dtypes(tmp_path / "plain" / "model.tflite")


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")  # the rung's candidates are built here, not read back


class _ConvThenOutlier(torch.nn.Module):
    """A benign convolution, then a Linear with an outlier channel into a tanh: only the Linear's
    output needs 16 bits."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc1, self.fc2 = torch.nn.Linear(288, 24), torch.nn.Linear(24, 16)
        with torch.no_grad():
            self.fc1.weight[0] *= 400.0

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(torch.relu(self.conv(x)).flatten(1))))


def test_with_score_to_spare_the_heavy_op_types_go_back_to_int8(tmp_path, monkeypatch):
    """int8 kernels are the fast ones; where every op in float clears the aim, each compute-heavy
    op type returns to int8 while the aim holds: the convolution does, the Linear whose outlier
    channel int8 cannot hold does not."""
    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    torch.manual_seed(0)
    program = tpuedge.export(_ConvThenOutlier().eval(), (torch.zeros(1, 3, 8, 8),), name="conv_outlier")
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((1, 3, 8, 8)).astype(np.float32),) for _ in range(32)]
    art = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    recipe = art.manifest["recipe"]
    rung = recipe["every_op"]
    back = {t["back_to_int8"]: t for t in rung["tried"] if "back_to_int8" in t}
    assert set(back) == {"CONV_2D", "FULLY_CONNECTED"}
    assert back["CONV_2D"]["score"] >= rung["aim"] > back["FULLY_CONNECTED"]["score"]
    assert [o["group"] for o in recipe["non_int8_ops"]] == ["every_op but CONV_2D"]
    assert art.manifest["accuracy_budget"]["met"]


class _LookupThenOutliers(torch.nn.Module):
    """Token ids through an embedding table (as the int8 rewrites store it: one int8 gather) into
    the outlier Linears, which need every op in float."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(2000, 16)
        self.outliers = _Outliers()

    def forward(self, ids):
        return self.outliers(self.table(ids).mean(1))


def test_the_float_rung_puts_an_embedding_table_back_to_int8(tmp_path, monkeypatch):
    """The table is most of a text model's bytes: MiniLM-L6's every-op-float recipe kept its table
    float (57.9 MB for 22.7M parameters). The rung returns table lookups to int8 first, measured:
    without that it would stay float (128,000 bytes of float32 table)."""
    from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite

    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    torch.manual_seed(0)
    program = tpuedge.export(_LookupThenOutliers().eval(), (torch.zeros(1, 6, dtype=torch.long),), name="lookup")
    rng = np.random.default_rng(0)
    calibration = [(rng.integers(0, 2000, (1, 6)),) for _ in range(32)]
    art = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    rung = art.manifest["recipe"]["every_op"]
    assert rung["kept"] and rung["precision"] == "float"
    back = [row["back_to_int8"] for row in rung["tried"] if "back_to_int8" in row]
    assert back[0] in ("GATHER_ND", "GATHER", "EMBEDDING_LOOKUP"), rung["tried"]  # tables are tried first
    assert art.manifest["accuracy_budget"]["met"]
    summary = summarize_tflite((tmp_path / "int8" / "model.tflite").read_bytes())
    assert not {"GATHER_ND", "GATHER", "EMBEDDING_LOOKUP"} & set(summary.float_ops), summary.float_ops
    assert summary.weight_dtypes.get("float32", 0) < 2000 * 16 * 4, summary.weight_dtypes  # the table is int8
    assert summary.weight_dtypes["int8"] >= 2000 * 16


class _TinyEncoder(torch.nn.Module):
    """Two transformer layers: 12 op groups (norms, softmaxes, attention products, GELUs)."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(16, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.out(self.enc(self.inp(x)))


def test_with_many_op_groups_the_float_rung_is_measured_first_and_spares_the_group_search(tmp_path, monkeypatch):
    """An input channel 200x the others spoils int8 activations throughout; every op in float
    (weights int8) meets the aim, and with 12 op groups it is measured before them: 6 candidates
    in all, where measuring each group first (and then this rung anyway) would take more."""
    from tpuedge.quantize.search_settings import EVERY_OP_FIRST_GROUPS

    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    torch.manual_seed(0)
    program = tpuedge.export(_TinyEncoder().eval(), (torch.zeros(1, 6, 16),), name="encoder")
    rng = np.random.default_rng(0)
    scale = np.r_[200.0, np.ones(15)]
    calibration = [((rng.standard_normal((1, 6, 16)) * scale).astype(np.float32),) for _ in range(32)]
    art = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    recipe = art.manifest["recipe"]
    rung = recipe["every_op"]
    assert "before_op_groups" in rung and rung["kept"] and rung["cosine"] >= rung["aim"], rung
    assert recipe["decisions"] == []  # no op group was measured
    assert recipe["search"]["evaluations"] < EVERY_OP_FIRST_GROUPS <= 12
    assert [o["group"].split(" ")[0] for o in recipe["non_int8_ops"]] == ["every_op"]
    assert art.manifest["accuracy_budget"]["met"]  # on the 8 samples calibration did not see
