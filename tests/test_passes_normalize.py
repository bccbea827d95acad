"""The L2-normalization pass: `F.normalize` and `x / x.norm(keepdim=True)` as x * rsqrt(sum(x*x)),
exact in float; and the int8 build it unblocks (LiteRT's int8 DIV refuses a divisor on its zero
point, which a short vector's norm rounds to)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
from tpuedge.shared_ir.passes.normalize_rsqrt import NormalizeAsRsqrt
from tpuedge.shared_ir.program import Program


class _Heads(torch.nn.Module):
    """Tokens projected, then normalized two ways; a division by another tensor's norm stays."""

    def __init__(self):
        super().__init__()
        self.q, self.k = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        q = F.normalize(self.q(x), dim=-1)
        k = self.k(x)
        k = k / k.norm(dim=-1, keepdim=True)
        other = x / self.q(x).norm(dim=-1, keepdim=True).clamp_min(1e-6)  # not its own norm
        return q @ k.transpose(-2, -1), other


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_Heads().eval(), (torch.zeros(1, 8, 16),), name="heads")


def _tokens(count: int, seed: int) -> list[list[np.ndarray]]:
    """Token rows of very different lengths: a few nearly zero (a short vector's norm is what
    rounds to the int8 zero point)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((count, 1, 8, 16)).astype(np.float32)
    x *= np.where(rng.random((count, 1, 8, 1)) < 0.25, 1e-3, 1.0).astype(np.float32)
    return [[s] for s in x]


def test_normalizations_become_rsqrt_products_with_the_same_numbers():
    program = _program()
    ep, result = NormalizeAsRsqrt()(program.exported_program)
    rewritten = Program(ep, name="heads")
    assert result.changed == 2
    ops = rewritten.op_histogram
    assert ops.get("aten.div.Tensor") == 1 and ops.get("aten.rsqrt.default") == 2  # `other` keeps its division
    assert "aten.linalg_vector_norm.default" in ops  # `other`'s norm
    for sample in _tokens(4, seed=1):
        for want, got in zip(program.run(*sample), rewritten.run(*sample)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_a_program_without_normalization_is_left_as_it_is():
    program = tpuedge.export(torch.nn.Linear(4, 4).eval(), (torch.zeros(1, 4),))
    ep, result = NormalizeAsRsqrt()(program.exported_program)
    assert ep is program.exported_program and result.changed == 0


class _Normalized(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16, bias=False)  # a short token stays short

    def forward(self, x):
        return F.normalize(self.fc(x), dim=-1)


@pytest.mark.parametrize("target", ["android", "mcu"])
def test_int8_builds_of_a_normalized_head_run(target, tmp_path):
    """Old code: the int8 model's DIV stopped LiteRT ("div.cc: data[i] != zero_point"), android and
    mcu, a RuntimeError out of the build. Now no DIV by a norm is left. The norms here span three
    decades, more than an int8 RSQRT holds: android's search lifts it out of int8 and meets the
    budget; mcu (strict int8) runs, and says it is below budget."""
    torch.manual_seed(0)
    program = tpuedge.export(_Normalized().eval(), (torch.zeros(1, 8, 16),), name="normalized")
    options = {"quantize": "int8"} if target == "android" else {"eval": "none", "allow_below_budget": True}
    art = tpuedge.build(program, target, tmp_path / target, calibration=_tokens(48, 0), **options)
    ops = summarize_tflite(next((tmp_path / target).glob("*.tflite")).read_bytes()).op_histogram
    assert "DIV" not in ops and ops.get("RSQRT") == 1, ops
    budget = art.manifest["accuracy_budget"]
    assert budget["met"] if target == "android" else np.isfinite(budget["measured"]["sample_cosine_per_output"][0])


class _Shares(torch.nn.Module):
    """Each token's share of its own sum: a division no pass rewrites, whose divisor (a short
    token's sum) rounds to the int8 zero point."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16, bias=False)

    def forward(self, x):
        y = torch.relu(self.fc(x)) + 1e-6
        return y / y.sum(-1, keepdim=True)


def test_a_division_litert_refuses_in_int8_is_a_failed_recipe_not_a_crash(tmp_path):
    """Old code: the all-int8 candidate's DIV stopped LiteRT and the build died with a RuntimeError
    traceback. Now a candidate LiteRT refuses (or whose outputs are inf/NaN: a float DIV by an
    int8 zero) scores worst and the search goes on; the division is a sensitive group of its own.
    In strict int8 no recipe keeps these short tokens' sums off zero, and the build exits 1,
    saying so; otherwise every activation at 16 bits does (the search's last resort)."""
    from tpuedge.shared_ir.errors import BudgetError

    torch.manual_seed(0)
    program = tpuedge.export(_Shares().eval(), (torch.zeros(1, 8, 16),), name="shares")
    with pytest.raises(BudgetError) as caught:
        tpuedge.build(
            program, "android", tmp_path / "out", quantize="int8", calibration=_tokens(48, 0), strict_int8=True
        )
    text = str(caught.value)
    assert "stops LiteRT" in text or "LiteRT refused to run it" in text.split("Recipes tried", 1)[1], text
    assert not (tmp_path / "out").exists()

    art = tpuedge.build(program, "android", tmp_path / "out", quantize="int8", calibration=_tokens(48, 0))
    recipe = art.manifest["recipe"]
    assert min(c["cosine"] for c in recipe["search"]["candidates"]) == -1.0  # the refused ones, scored worst
    assert recipe["every_op"]["kept"] and art.manifest["accuracy_budget"]["met"]


class _TwoShares(torch.nn.Module):
    """Two divisions by computed sums (as timm's EfficientViT-B0 has one per attention)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 16, bias=False)
        self.fc2 = torch.nn.Linear(16, 16, bias=False)

    def forward(self, x):
        y = torch.relu(self.fc1(x)) + 1e-6
        y = y / y.sum(-1, keepdim=True)
        z = torch.relu(self.fc2(y)) + 1e-6
        return z / z.sum(-1, keepdim=True)


def test_divisions_are_float_from_the_start_of_the_android_search(tmp_path):
    """Old code searched a division like any group, one at a time: with two, every candidate kept
    one int8 DIV and LiteRT refused it (timm's EfficientViT-B0 ended below budget, 0.951, every
    candidate but the every-op float rung refused). Now android's divisions by a computed tensor are
    float in every candidate (an int8 one also stops on a phone's input whose divisor rounds to
    zero), so the search's candidates run: EfficientViT-B0 builds at 0.990 with its convolutions int8."""
    torch.manual_seed(0)
    program = tpuedge.export(_TwoShares().eval(), (torch.zeros(1, 8, 16),), name="two_shares")
    art = tpuedge.build(program, "android", tmp_path / "out", quantize="int8", calibration=_tokens(48, 0))
    recipe = art.manifest["recipe"]
    first = recipe["search"]["candidates"][0]
    assert first["recipe"] == "all int8" and first["cosine"] > 0.5, first  # old code: -1.0, refused
    divisions = [o for o in recipe["non_int8_ops"] if o["kind"] == "division"]
    assert [o["precision"] for o in divisions] == ["float", "float"] and "zero point" in divisions[0]["why"]
    assert art.manifest["accuracy_budget"]["met"]
    ops = summarize_tflite((tmp_path / "out" / "model.tflite").read_bytes())
    assert ops.op_histogram.get("DIV") == 2


def test_mcu_build_whose_division_litert_refuses_exits_below_budget_not_internal_error(tmp_path):
    """Old code: the mcu build's cross-check ran the strict-int8 model in LiteRT, whose DIV refused
    the divisor (div.cc: data[i] != zero_point), and the build died as an internal error with a
    traceback. Now it is the model's failure, named: exit 1, nothing written, the folder as it was."""
    from tpuedge.shared_ir.errors import BudgetError

    torch.manual_seed(0)
    program = tpuedge.export(_Shares().eval(), (torch.zeros(1, 8, 16),), name="shares")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier build")
    with pytest.raises(BudgetError) as caught:
        tpuedge.build(program, "mcu", out, calibration=_tokens(48, 0), allow_below_budget=True)
    text = " ".join(str(caught.value).split())
    assert "stops LiteRT" in text and "DIV" in text and "held out from calibration" in text, text
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_auto_leaves_out_a_candidate_litert_refuses_and_builds(tmp_path):
    """Old code: --quantize auto died with the int8 candidate's RuntimeError. Now that candidate is
    left out (the manifest says why, if LiteRT refused it) and another scheme is chosen."""
    torch.manual_seed(0)
    program = tpuedge.export(_Shares().eval(), (torch.zeros(1, 8, 16),), name="shares")
    art = tpuedge.build(program, "android", tmp_path / "auto", quantize="auto", calibration=_tokens(48, 0))
    auto = art.manifest["recipe"]["auto"]
    assert art.manifest["accuracy_budget"]["met"]
    int8 = [c for c in auto["candidates"] if c["scheme"] == "int8"]
    # refused, or built (every activation at 16 bits keeps the divisor off zero) and measured
    assert "int8" in auto.get("refused_by_litert", {}) or "met_budget" in int8[0], auto
