"""Position ids as RoBERTa-family encoders compute them, on mcu: `cumsum` over the non-padding
mask (log-step shifted additions) and a `gather` of token type ids from a buffer of zeros (a
constant). Both were refused by the mcu check; each rewrite is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.passes import PassManager
from tpuedge.shared_ir.passes.constant_fold import FoldConstants
from tpuedge.shared_ir.passes.cumsum_steps import CumsumAsShiftedSums
from tpuedge.shared_ir.passes.uniform_gather import UniformGather
from tpuedge.shared_ir.program import Program

PAD = 1


class _Cumsum(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


class _PositionIds(torch.nn.Module):
    """RoBERTa's create_position_ids_from_input_ids: int32 mask, int64 cumsum, back to ids."""

    def forward(self, ids):
        mask = ids.ne(PAD).int()
        return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + PAD


@pytest.mark.parametrize("shape, dim", [((1, 7), 1), ((2, 16, 3), 1), ((1, 5, 9), -1)])
def test_cumsum_becomes_shifted_additions(shape, dim):
    program = tpuedge.export(_Cumsum(dim), (torch.zeros(shape),), name="cumsum")
    ep, (result,) = PassManager([CumsumAsShiftedSums()]).run(program.exported_program)
    rewritten = Program(ep, name="cumsum")
    assert result.changed == 1 and "aten.cumsum.default" not in rewritten.op_histogram
    assert rewritten.op_histogram["aten.add.Tensor"] == int(np.ceil(np.log2(shape[dim])))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(rewritten.run(x)[0], program.run(x)[0], rtol=1e-5, atol=1e-5)


def test_integer_position_ids_are_exact():
    ids = torch.tensor([[5, 6, PAD, 7, 8, PAD, PAD, 9, 4, 3, 2]])
    program = tpuedge.export(_PositionIds(), (ids,), name="positions")
    ep, _ = PassManager([CumsumAsShiftedSums()]).run(program.exported_program)
    got = Program(ep, name="positions").run(ids.numpy())[0]
    np.testing.assert_array_equal(got, _PositionIds()(ids).numpy())
    assert got.dtype == np.int64


class _Embeddings(torch.nn.Module):
    """A RoBERTa-style embedding block: words + positions from the mask + token types gathered
    from a buffer of zeros at those positions, a LayerNorm, a Linear."""

    def __init__(self, vocab: int = 40, length: int = 12, dim: int = 16):
        super().__init__()
        self.words = torch.nn.Embedding(vocab, dim)
        self.positions = torch.nn.Embedding(length + 2, dim)
        self.token_types = torch.nn.Embedding(1, dim)
        self.register_buffer("token_type_ids", torch.zeros(1, length + 2, dtype=torch.long), persistent=False)
        self.norm = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 8)

    def forward(self, ids):
        positions = _PositionIds()(ids)
        types = torch.gather(self.token_type_ids.expand(ids.shape[0], -1), 1, positions)
        x = self.words(ids) + self.positions(positions) + self.token_types(types)
        return self.fc(self.norm(x))


def test_a_gather_from_a_uniform_buffer_becomes_a_constant():
    torch.manual_seed(0)
    ids = torch.tensor([[5, 6, 7, PAD, PAD, 9, 10, 11, 12, 13, PAD, 2]])
    program = tpuedge.export(_Embeddings().eval(), (ids,), name="embeddings")
    ep, (_, result) = PassManager([FoldConstants(), UniformGather()]).run(program.exported_program)
    rewritten = Program(ep, name="embeddings")
    assert result.changed == 1 and "aten.gather.default" not in rewritten.op_histogram
    np.testing.assert_array_equal(rewritten.run(ids.numpy())[0], program.run(ids.numpy())[0])


def test_a_gather_from_a_constant_with_different_entries_stays():
    class Gather(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.arange(12).reshape(1, 12), persistent=False)

        def forward(self, index):
            return torch.gather(self.table, 1, index)

    program = tpuedge.export(Gather(), (torch.zeros(1, 12, dtype=torch.long),), name="gather")
    _, (result,) = PassManager([UniformGather()]).run(program.exported_program)
    assert result.changed == 0


def test_roberta_style_embeddings_build_for_mcu(tmp_path):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    def sample():
        ids = rng.integers(2, 40, size=(1, 12))
        ids[0, rng.integers(6, 12) :] = PAD  # padded at the end, as a tokenizer pads
        return (ids.astype(np.int64),)

    program = tpuedge.export(_Embeddings().eval(), (torch.from_numpy(sample()[0]),), name="embeddings")
    assert program.check("mcu") == []
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=[sample() for _ in range(32)])
    assert {"cumsum-as-shifted-sums", "uniform-gather"} <= {r["pass"] for r in art.manifest["rewrites"]}
    assert art.manifest["verification"]["held_out"]["tflm_vs_float"]["sample_cosine"] >= 0.99
