"""Embedding tables in static int8: litert-torch's EMBEDDING_LOOKUP stayed float32 under the
static recipe (MiniLM's int8 model was 2.9x its parameter bytes); written as a gather on the IR
the table is stored in int8. Same numbers in float; a real LiteRT build shows the bytes."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.embedding_gather import EmbeddingAsGather
from tpuedge.shared_ir.program import Program

VOCAB, DIM = 2000, 64


class _Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.fc = torch.nn.Linear(DIM, 8)

    def forward(self, ids):
        return self.fc(self.embed(ids)).mean(1)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_Tokens().eval(), (torch.zeros(1, 16, dtype=torch.long),), name="tokens")


def _ids(count, seed=0):
    return [[x] for x in np.random.default_rng(seed).integers(0, VOCAB, (count, 1, 16)).astype(np.int64)]


def test_an_embedding_becomes_a_gather_with_the_same_numbers():
    program = _program()
    ep, result = EmbeddingAsGather()(program.exported_program)
    rewritten = Program(ep, name="tokens")
    assert result.changed == 1 and "aten.embedding.default" not in rewritten.op_histogram
    for sample in _ids(3, seed=1):
        np.testing.assert_array_equal(rewritten.run(*sample)[0], program.run(*sample)[0])


def test_static_int8_stores_the_table_in_int8(tmp_path):
    """Old code: 500 KiB of float32 table in the int8 model (1.00x the float model)."""
    artifact = tpuedge.build(_program(), "android", tmp_path / "a", quantize="int8", calibration=_ids(32))
    sizes = artifact.manifest["sizes"]
    assert (
        sizes["weight_bytes"] < 0.3 * VOCAB * DIM * 4
        and sizes["tflite_bytes"] < 1.1 * (VOCAB * DIM + 8 * DIM) + 32 * 1024
    )
    assert artifact.manifest["accuracy_budget"]["met"]
    assert [r["pass"] for r in artifact.manifest["recipe"]["ir_rewrites"]] == ["embedding-as-gather"]
