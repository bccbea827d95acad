"""What text models need on mcu, each found on a tiny HF architecture (BERT, T5, GPT-2):
int8 embedding tables (edge/mcu/tflm_forms.py), SELECT as SELECT_V2, the attention-mask gather by
constant aranges as a view (shared_ir/passes/index_as_view.py), and in-place ops on folded
constants (shared_ir/passes/constant_fold.py). Each ran into a refusal or a crash before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes.index_as_view import arange_view_shape

VOCAB = 50


class _Lookup(torch.nn.Module):
    """The looked-up rows are the model's output, so the test sees the table's int8 values."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(VOCAB, 16)

    def forward(self, ids):
        return self.table(ids)


def test_lookup_fold_is_bit_exact_and_stores_the_table_in_int8():
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.litert.convert import program_to_tflite
    from tpuedge.edge.mcu.tflm_forms import tflm_forms
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner
    from tpuedge.quantize.config import QuantConfig

    torch.manual_seed(0)
    program = tpuedge.export(_Lookup().eval(), (torch.zeros(1, 8, dtype=torch.long),), name="lookup")
    calibration = [[np.random.default_rng(k).integers(0, VOCAB, (1, 8))] for k in range(16)]
    config = QuantConfig(scheme="int8", strict_int8=True, io_dtype="int8")
    converted = program_to_tflite(program, config, calibration, target="mcu").tflite
    folded, forms = tflm_forms(converted)
    assert forms["int8_lookup_tables"] == 1
    assert tflite_file.operator_names(tflite_file.read_model(converted)).count("QUANTIZE") >= 1
    model = tflite_file.read_model(folded)
    graph = model.subgraphs[0]
    names = tflite_file.operator_names(model)
    (lookup,) = [op for op in graph.operators if names[op.opcodeIndex] == "EMBEDDING_LOOKUP"]
    assert tflite_file.dtype_name(graph.tensors[int(lookup.inputs[1])].type) == "int8"
    assert "QUANTIZE" not in [names[op.opcodeIndex] for op in graph.operators]
    assert len(converted) - len(folded) >= 0.7 * VOCAB * 16 * 3  # float32 -> int8: 3 bytes a value saved
    before, after = TflmRunner(converted, 64 * 1024), TflmRunner(folded, 64 * 1024)
    every_id = np.arange(VOCAB, dtype=np.int32).reshape(-1, 2)  # each table row at least once
    for ids in np.pad(every_id, ((0, 0), (0, 6)), mode="wrap"):
        x = [ids.reshape(1, 8)]
        assert np.array_equal(before.run_raw(x)[0], after.run_raw(x)[0])


class _MaskedEncoder(torch.nn.Module):
    """HF's mask construction in miniature: padding_mask[batch_idx, kv_idx] (a gather of bools
    by constant aranges), then torch.where over equal shapes (SELECT), then an embedding."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(VOCAB, 8)
        self.register_buffer("batch_idx", torch.arange(1).view(1, 1, 1, 1))
        self.register_buffer("kv_idx", torch.arange(8).view(1, 1, 1, 8))

    def forward(self, ids, mask):
        h = self.table(ids)  # (1, 8, 8)
        keep = mask.to(torch.bool)[self.batch_idx, self.kv_idx]  # (1, 1, 1, 8)
        scores = h.sum(-1)  # (1, 8)
        scores = torch.where(keep.view(1, 8), scores, scores - 30.0)  # equal shapes: SELECT
        return torch.softmax(scores, -1).unsqueeze(1) @ h


def _ids_and_masks(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((n, 8), np.int64)
    for row, pad in zip(mask, rng.integers(0, 4, n)):
        row[8 - pad :] = 0
    return {"ids": rng.integers(0, VOCAB, (n, 8)), "mask": mask}


def test_a_masked_text_model_builds_for_mcu_and_meets_its_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(
        _MaskedEncoder().eval(),
        (torch.zeros(1, 8, dtype=torch.long), torch.ones(1, 8, dtype=torch.long)),
        name="masked",
    )
    assert program.check("mcu") == []  # embedding, the bool gather and the equal-shape where all pass
    np.savez(tmp_path / "cal.npz", **_ids_and_masks(48, 1))
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=str(tmp_path / "cal.npz"))
    ops = {o["op"] for o in art.manifest["tflm_ops"]}
    assert {"EMBEDDING_LOOKUP", "SELECT_V2"} <= ops and not {"SELECT", "GATHER_ND", "DEQUANTIZE"} & ops
    forms = art.manifest["quantization"]["recipe"]["tflm_forms"]
    assert forms["int8_lookup_tables"] == 1 and forms["select_as_select_v2"] >= 1
    assert art.manifest["accuracy_budget"]["met"]
    views = [r for r in art.manifest["rewrites"] if r["pass"] == "constant-index-as-view"]
    assert views and views[0]["changed"] == 1


@pytest.mark.parametrize(
    "indices, shape, expected",
    [
        ([torch.arange(1).view(1, 1, 1, 1), torch.arange(8).view(1, 1, 1, 8)], (1, 8), ([1, 1, 1, 8], [1, 1, 1, 8])),
        ([torch.arange(2).view(2, 1), torch.arange(3).view(1, 3)], (2, 3, 5), ([2, 3, 5], [2, 3, 5])),
        ([torch.arange(3).view(1, 3).expand(4, 3)], (3, 2), ([1, 3, 2], [4, 3, 2])),  # a broadcast: expand
        ([torch.tensor([0, 2, 1])], (3,), None),  # a permutation is a real gather
        ([torch.arange(3).view(1, 3), torch.arange(2).view(2, 1)], (2, 3), None),  # axes out of order
        ([torch.arange(4)], (5,), None),  # a prefix of the dim: a slice, not left to this pass
    ],
)
def test_which_constant_gathers_are_views(indices, shape, expected):
    assert arange_view_shape(indices, shape) == expected
    if expected is not None:
        x = torch.randn(shape)
        view, expanded = expected
        assert torch.equal(x[tuple(indices)], x.view(view).expand(expanded))


class _RelativeBuckets(torch.nn.Module):
    """T5's relative position buckets: an in-place add on a value computed from constants."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Embedding(16, 1)

    def forward(self, x):
        positions = torch.arange(8)
        relative = positions[None, :] - positions[:, None]
        buckets = (relative > 0).to(torch.long) * 8
        buckets += torch.abs(relative).clamp(max=7)
        return x + self.bias(buckets)[:, :, 0]


def test_an_in_place_op_on_a_folded_constant_folds_with_it(tmp_path):
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants

    torch.manual_seed(0)
    program = tpuedge.export(_RelativeBuckets().eval(), (torch.zeros(8, 8),), name="buckets")
    assert "aten.add_.Tensor" in program.op_histogram
    ep, result = FoldConstants()(program.exported_program)
    assert "add_.Tensor" in result.to_json()["folded_ops"]
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    from tpuedge.shared_ir.program import Program

    np.testing.assert_array_equal(Program(ep, name="folded").run(x)[0], program.run(x)[0])
    # a folded constant left mutable stops litert-torch: "Constant _folded_add is mutated in the forward method"
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(1).standard_normal((32, 8, 8)).astype(np.float32))
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=str(tmp_path / "cal.npz"))
    assert art.manifest["accuracy_budget"]["met"]


class _MaskCast(torch.nn.Module):
    """`mask.to(torch.float32)` of an integer input: a CAST whose float value only QUANTIZE reads."""

    def forward(self, x, mask):
        return x * mask.to(torch.float32).unsqueeze(-1) + 0.5


def test_a_cast_of_integer_input_builds_as_check_says(tmp_path):
    """check passed it, and the build refused the CAST as float compute (DeBERTa-v2's mask)."""
    program = tpuedge.export(
        _MaskCast().eval(), (torch.randn(1, 8, 4), torch.ones(1, 8, dtype=torch.long)), name="mask_cast"
    )
    assert program.check("mcu") == []
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "cal.npz", x=rng.standard_normal((32, 8, 4)).astype(np.float32), mask=rng.integers(0, 2, (32, 8))
    )
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=str(tmp_path / "cal.npz"))
    assert "CAST" in {o["op"] for o in art.manifest["tflm_ops"]}
    assert art.manifest["accuracy_budget"]["met"]
