"""Casts and input-independent ops on the IR: no-op casts vanish, real ones become one
canonical op TFLite-Micro has, constant subgraphs fold, so a model's mcu answer is not an op."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.casts import CanonicalCasts
from tpuedge.shared_ir.passes.constant_fold import FoldConstants
from tpuedge.shared_ir.program import Program


class _Casts(torch.nn.Module):
    """Plain casts as users write them, and a mask built from arange/gather over a buffer."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.emb = torch.nn.Embedding(4, 8)
        self.register_buffer("pos", torch.arange(4).unsqueeze(0), persistent=False)

    def forward(self, x, mask):
        pos = torch.gather(self.pos.expand(1, -1), 1, self.pos)
        y = self.fc(x).to(torch.float32).to(x.device) + self.emb(pos)
        keep = (torch.arange(4)[None, :] >= 0) & mask.to(torch.bool)
        return y * keep.to(y.dtype).unsqueeze(-1)


def _casts_program():
    torch.manual_seed(0)
    return tpuedge.export(_Casts().eval(), (torch.zeros(1, 4, 8), torch.ones(1, 4, dtype=torch.long)), name="casts")


def _samples(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, 4, 8)).astype(np.float32), rng.integers(0, 2, (1, 4))) for _ in range(n)]


def test_noop_casts_vanish_and_dtype_casts_become_one_op():
    program = _casts_program()
    assert {"aten.to.dtype", "aten.to.dtype_layout", "aten._assert_tensor_metadata.default"} <= set(
        program.op_histogram
    )
    ep, results = PassManager([CanonicalCasts(), FoldConstants()]).run(program.exported_program)
    rewritten = Program(ep, name="casts")
    hist = rewritten.op_histogram
    assert not [k for k in hist if k.startswith("aten.to.") or "assert" in k]
    assert hist.get("aten._to_copy.default") == 1  # int64 mask -> bool
    assert hist.get("aten.where.Scalar") == 1  # bool -> float32: where(mask, 1, 0)
    assert results[0].details == {"removed": 2, "dtype_casts": 2}
    assert {"arange.default", "gather.default", "expand.default", "ge.Scalar"} <= set(results[1].details["folded_ops"])
    assert not {"aten.arange.default", "aten.gather.default", "aten.ge.Scalar"} & set(hist)
    for sample in _samples(6):
        np.testing.assert_array_equal(program.run(*sample)[0], rewritten.run(*sample)[0])


def test_casts_build_for_mcu_and_run_in_tflm(tmp_path):
    program = _casts_program()
    assert program.check("mcu") == []
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=_samples(32))
    ops = {o["op"] for o in art.manifest["tflm_ops"]}
    assert {"CAST", "SELECT_V2"} <= ops and "GATHER" not in ops
    tflm = art.manifest["verification"]["held_out"]  # measured in the TFLite-Micro interpreter
    assert tflm["tflm_vs_float"]["cosine"] > 0.99 and tflm["tflm_vs_litert_max_lsb"] <= 1


def test_fold_leaves_parameters_and_large_expansions_alone():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.register_buffer("b", torch.ones(1, 1))

        def forward(self, x):
            return x + self.w.t().sum() + self.b.expand(512, 512)

    program = tpuedge.export(Net(), (torch.zeros(512, 512),), name="fold")
    ep, result = FoldConstants()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


def test_bert_encoder_passes_the_mcu_check_and_builds(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids, mask = torch.randint(0, 100, (1, 16)), torch.ones(1, 16, dtype=torch.long)
    program = tpuedge.export(model, (ids, mask), name="bert")
    assert {"aten.to.dtype_layout", "aten.to.device"} <= set(program.op_histogram)
    # neither the casts nor the token embedding (an int8 table, edge/mcu/tflm_forms.py) nor the
    # mask's gather by constant aranges (a view) block it
    assert program.check("mcu") == []
    assert program.check("android") == []
    rng = np.random.default_rng(1)
    mask = np.ones((40, 16), np.int64)
    for row, pad in zip(mask, rng.integers(0, 6, 40)):
        row[16 - pad :] = 0  # padded sentences: the mask matters
    np.savez(tmp_path / "cal.npz", input_ids=rng.integers(0, 100, (40, 16)), attention_mask=mask)
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=str(tmp_path / "cal.npz"))
    assert "EMBEDDING_LOOKUP" in {o["op"] for o in art.manifest["tflm_ops"]}
    assert art.manifest["accuracy_budget"]["met"]
