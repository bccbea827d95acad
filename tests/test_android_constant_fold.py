"""Android lowering folds what depends on no input (the fold-constants pass mcu runs too): a
positional encoding computed at run time from aranges (timm's EdgeNeXt) became int8 DIV/POW/SIN
ops whose divisor (10000 ** k, 1 to 10,000 on one int8 grid) rounds to zero, and LiteRT refused
the model."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite


class _FourierPositions(torch.nn.Module):
    """Tokens plus a sine positional encoding built in forward from aranges, as EdgeNeXt does."""

    def __init__(self, dim: int = 16, tokens: int = 8):
        super().__init__()
        self.dim, self.tokens, self.fc = dim, tokens, torch.nn.Linear(dim, dim)

    def forward(self, x):
        position = torch.arange(1, self.tokens + 1, dtype=torch.float32, device=x.device)[:, None]
        dim_t = torch.arange(self.dim, dtype=torch.float32, device=x.device)
        dim_t = 10000.0 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.dim)
        return self.fc(x + torch.sin(position / dim_t))


def test_a_positional_encoding_from_aranges_is_one_constant_on_android(tmp_path):
    """Old code: BudgetError, the int8 model stops LiteRT (div.cc: data[i] != zero_point)."""
    torch.manual_seed(0)
    program = tpuedge.export(_FourierPositions().eval(), (torch.zeros(1, 8, 16),), name="positions")
    calibration = [[x] for x in np.random.default_rng(0).standard_normal((32, 1, 8, 16)).astype(np.float32)]
    art = tpuedge.build(program, "android", tmp_path / "a", quantize="int8", strict_int8=True, calibration=calibration)
    ops = summarize_tflite((tmp_path / "a" / "model.tflite").read_bytes()).op_histogram
    assert not {"DIV", "POW", "SIN", "FLOOR_DIV"} & set(ops), ops
    assert art.manifest["accuracy_budget"]["met"]


class _RelativeIndex(torch.nn.Module):
    """A relative position index built as HF BEiT builds it in forward: in-place adds and a
    multiply on views of one coordinate tensor, written into slices of a zeros tensor, then a
    table lookup."""

    def __init__(self, side: int = 3):
        super().__init__()
        self.side = side
        self.table = torch.nn.Parameter(torch.randn((2 * side - 1) ** 2 + 3, 1))

    def forward(self, x):
        s, distances = self.side, (2 * self.side - 1) ** 2 + 3
        coords = torch.stack(torch.meshgrid(torch.arange(s), torch.arange(s), indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        relative[:, :, 0] += s - 1
        relative[:, :, 1] += s - 1
        relative[:, :, 0] *= 2 * s - 1
        index = torch.zeros(size=(s * s + 1,) * 2, dtype=relative.dtype)
        index[1:, 1:] = relative.sum(-1)
        index[0, 0:] = distances - 3
        index[0:, 0] = distances - 2
        index[0, 0] = distances - 1
        n = s * s + 1
        return x + self.table[index.view(-1)].view(n, n)


def test_in_place_writes_through_views_are_not_folded_apart(tmp_path):
    """Old code folded each view on its own copy and left a constant the graph then wrote to:
    `check` and every android build stopped inside litert-torch with "Constant _folded_slice
    is mutated in the forward method" (HF BEiT). The answer is torch's."""
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.program import Program

    torch.manual_seed(0)
    program = tpuedge.export(_RelativeIndex().eval(), (torch.zeros(10, 10),), name="relative_index")
    x = np.random.default_rng(0).standard_normal((10, 10)).astype(np.float32)
    folded, _ = FoldConstants()(program.exported_program)
    np.testing.assert_array_equal(Program(folded, name="folded").run(x)[0], program.run(x)[0])
    assert program.check("android") == []
    art = tpuedge.build(program, "android", tmp_path / "a", quantize="none")
    np.testing.assert_allclose(art.run(x)[0], program.run(x)[0], atol=1e-6)


def test_in_place_writes_through_views_fold_into_the_index_they_build():
    """The writes are evaluated as torch runs them (views share storage), and the index they
    build is one constant: before, they stayed in the graph and the mcu check refused copy_ and
    fill_ (HF BEiT's relative position bias, refused on mcu)."""
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.program import Program

    torch.manual_seed(0)
    program = tpuedge.export(_RelativeIndex().eval(), (torch.zeros(10, 10),), name="relative_index")
    folded, result = FoldConstants()(program.exported_program)
    ops = set(Program(folded, name="folded").op_histogram)
    assert not {op for op in ops if op.split(".")[1].endswith("_")}, ops  # no in-place op left
    x = np.random.default_rng(0).standard_normal((10, 10)).astype(np.float32)
    np.testing.assert_array_equal(Program(folded, name="folded").run(x)[0], program.run(x)[0])
    assert program.check("mcu") == []


class _ReadThenWritten(torch.nn.Module):
    """A constant read by the input's side, then written in place, then read again: two
    readers see two values, so it is not one constant."""

    def forward(self, x):
        c = torch.zeros(4)
        first = x + c
        c.add_(1.0)
        return first * (x + c)


def test_a_constant_written_between_two_readers_is_not_folded():
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.program import Program

    program = tpuedge.export(_ReadThenWritten().eval(), (torch.zeros(4),), name="read_then_written")
    folded, _ = FoldConstants()(program.exported_program)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(Program(folded, name="folded").run(x)[0], program.run(x)[0])


class _ConstantChunkWritten(torch.nn.Module):
    """A chunk of a constant written with the input: the constant is that write's, not folded."""

    def forward(self, x):
        base = torch.arange(8, dtype=torch.float32)
        head, _ = base.split(4)
        head.add_(x)
        return base * 2.0


def test_a_constant_written_by_the_input_through_a_chunk_is_not_folded():
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.program import Program

    program = tpuedge.export(_ConstantChunkWritten().eval(), (torch.zeros(4),), name="chunk_written")
    folded, _ = FoldConstants()(program.exported_program)
    x = np.arange(4, dtype=np.float32) + 1.0
    np.testing.assert_array_equal(Program(folded, name="folded").run(x)[0], program.run(x)[0])
