"""An assignment into a slice of a computed value (timm's MViTv2 adds its relative positions into
`attn[:, :, 1:, 1:]`; `a[:, 0] = 0.5`) as concatenations, read by everything after the write:
the mcu check refused the `copy_` / `fill_` torch.export keeps for them; exact in float."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.slice_assign import SliceAssignmentAsConcat
from tpuedge.shared_ir.program import Program

from mcu_rewrite_helpers import assert_builds_for_mcu_within_budget


class _Writes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rel = torch.nn.Parameter(torch.randn(1, 1, 3, 3))
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):  # x: [N, 2, 4, 4]
        attn = self.fc(x)
        before = attn.sum(dim=-1)  # read before the writes: the old values
        attn[:, :, 1:, 1:] = attn[:, :, 1:, 1:] + self.rel  # MViTv2's relative positions
        attn[:, 0] = 0.5  # a fill of a select
        attn[..., 2] = attn[..., 0] * 2.0  # a copy into a select of the last dim
        attn[:, :, 0:, 0:] = (attn.view(-1, 2, 16) * 0.5).view(-1, 2, 4, 4)  # the whole value (MViTv2, no cls token)
        return attn.softmax(dim=-1), before


class _AliasedRead(torch.nn.Module):
    def forward(self, x):
        a = x * 2.0
        early = a[:, :1]  # a view taken before the write ...
        a[:, 1:] = 0.0
        return early * 1.0 + a  # ... and read after it: left as it is


def test_slice_assignments_become_concatenations_with_the_same_numbers():
    torch.manual_seed(0)
    program = tpuedge.export(_Writes().eval(), (torch.zeros(1, 2, 4, 4),), name="writes")
    ep, result = SliceAssignmentAsConcat()(program.exported_program)
    assert result.changed == 4
    ops = Program(ep, name="writes").op_histogram
    assert not {"aten.copy_.default", "aten.fill_.Scalar", "aten.fill_.Tensor"} & set(ops)
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    for got, want in zip(Program(ep, name="writes").run(x), program.run(x)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert program.check("mcu") == []  # old code: aten.copy_.default, aten.fill_.Tensor


def test_a_view_read_after_the_write_is_left_as_it_is():
    program = tpuedge.export(_AliasedRead().eval(), (torch.zeros(1, 3, 2),), name="aliased")
    ep, result = SliceAssignmentAsConcat()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


def test_the_written_model_runs_in_tflite_micro_within_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_Writes().eval(), (torch.zeros(1, 2, 4, 4),), name="writes")
    assert_builds_for_mcu_within_budget(program, (1, 2, 4, 4), {"slice-assignment-as-concat"}, tmp_path / "mcu")


def test_hf_rwkv_recurrence_converts_for_android(tmp_path):
    """HF RWKV's recurrence (its CPU path) writes each step's output into `out[:, t]`. Android did
    not rewrite those writes (mcu's passes did), and litert-torch failed on them: "MLIRError:
    broadcast_dimensions size (2) does not match operand rank (3)", an internal error. The
    rewrite is now one of the canonical forms both edge targets begin with."""
    import transformers

    torch.manual_seed(0)
    config = transformers.RwkvConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        attention_hidden_size=16,
        intermediate_size=32,
        context_length=6,
        use_cache=False,
    )

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = transformers.RwkvForCausalLM(config)

        def forward(self, ids):
            return self.model(ids).logits

    ids = torch.randint(0, 50, (1, 6))
    program = tpuedge.export(Logits().eval(), (ids,), name="rwkv")
    artifact = tpuedge.build(program, "android", tmp_path / "android", quantize="none")
    np.testing.assert_allclose(artifact.run(ids.numpy())[0], program.run(ids.numpy())[0], rtol=1e-4, atol=1e-5)
