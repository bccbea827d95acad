"""Inference BatchNorm folded into the layer before it (shared_ir/passes/batchnorm_fold.py): the
same function to float rounding, one op per layer, the statistics gone from the program's
inputs; left alone where folding would change another computation. Both LiteRT targets get the
folded program (`litert_ir_passes`), and the float .tflite still matches torch."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.edge.litert.litert_lowering import litert_ir_passes
from tpuedge.shared_ir.passes.batchnorm_fold import FoldBatchNorm
from tpuedge.shared_ir.program import Program

_NORMS = ("aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default")


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    """BatchNorm statistics and affine parameters far from the identity, as a trained net's are."""
    torch.manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-2, 2)
                m.running_var.uniform_(0.1, 4)
                if m.affine:
                    m.weight.uniform_(0.2, 2)
                    m.bias.uniform_(-1, 1)
    return model.eval()


class _Layers(torch.nn.Module):
    """Conv without bias + BN, depthwise conv with bias + BN, Conv1d + BN1d, Linear + BN1d."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.conv, self.bn = nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8)
        self.dw, self.bn_dw = nn.Conv2d(8, 8, 3, groups=8), nn.BatchNorm2d(8)
        self.conv1d, self.bn1d = nn.Conv1d(8, 6, 3), nn.BatchNorm1d(6)
        self.fc, self.bn_fc = nn.Linear(6, 5), nn.BatchNorm1d(5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.bn_dw(self.dw(x)).flatten(2)  # N, 8, L
        x = torch.relu(self.bn1d(self.conv1d(x))).mean(2)
        return self.bn_fc(self.fc(x))


def _norms(program_or_ep) -> int:
    ep = getattr(program_or_ep, "exported_program", program_or_ep)
    return sum(1 for n in ep.graph.nodes if n.op == "call_function" and str(n.target) in _NORMS)


def test_folded_program_computes_the_same_with_no_batchnorm_and_no_statistics():
    model = _randomize(_Layers())
    x = torch.randn(2, 3, 16, 16)
    program = tpuedge.export(model, (x,), name="layers")
    inputs_before = len(program.exported_program.graph_signature.input_specs)
    ep, result = FoldBatchNorm()(program.exported_program)
    assert result.changed == 4 and _norms(ep) == 0
    # each BatchNorm's five inputs (weight, bias, mean, var, batch count) are gone but one: the
    # bias of the first, which carries the folded bias of the conv that had none
    assert len(ep.graph_signature.input_specs) == inputs_before - 4 * 5 + 1, ep.graph_signature.input_specs
    folded = Program(ep, name="layers")
    want = model(x).detach().numpy()
    got = folded.run(x.numpy())[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert _norms(program) == 4  # the input program is not touched
    np.testing.assert_array_equal(program.run(x.numpy())[0], want)


class _NotFoldable(torch.nn.Module):
    """A conv output read by BN and by a residual add; a transposed conv; a BN without affine."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.up, self.bn_up = nn.ConvTranspose2d(4, 4, 2, stride=2), nn.BatchNorm2d(4)
        self.plain, self.bn_plain = nn.Conv2d(4, 4, 1, bias=False), nn.BatchNorm2d(4, affine=False)

    def forward(self, x):
        y = self.conv(x)
        y = self.bn(y) + y
        return self.bn_plain(self.plain(self.bn_up(self.up(y))))


def test_batchnorms_whose_fold_would_change_another_computation_stay():
    program = tpuedge.export(_randomize(_NotFoldable()), (torch.randn(1, 4, 8, 8),), name="kept")
    ep, result = FoldBatchNorm()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU6(),
            nn.Conv2d(16, 16, 3, groups=16, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU6(),
            nn.Conv2d(16, 24, 1, bias=False),
            nn.BatchNorm2d(24),
        )
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def test_both_litert_targets_get_the_folded_program_and_the_float_model_matches_torch(tmp_path):
    model = _randomize(_ConvNet())
    x = torch.randn(1, 3, 32, 32)
    program = tpuedge.export(model, (x,), name="convnet")
    assert _norms(litert_ir_passes(program.exported_program)) == 0  # all 3 folded
    art = tpuedge.build(program, "android", tmp_path / "android", quantize="none", eval="none")
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    got = LiteRTRunner((art.directory / "model.tflite").read_bytes()).run([x.numpy()])[0]
    want = model(x).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_folded_weights_keep_their_dtype_and_the_statistics_leave_the_state():
    program = tpuedge.export(_randomize(_ConvNet()), (torch.randn(1, 3, 16, 16),), name="state")
    ep, _ = FoldBatchNorm()(program.exported_program)
    assert {v.dtype for v in ep.state_dict.values()} == {torch.float32}
    assert not any(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in ep.state_dict)
