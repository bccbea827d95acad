"""The identity-op pass: eval-mode dropout and copies vanish from the IR, numbers unchanged."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.identity_ops import RemoveIdentityOps
from tpuedge.shared_ir.program import Program


class _Dropouts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.drop = torch.nn.Dropout(0.3)
        self.drop2d = torch.nn.Dropout2d(0.2)
        self.fc = torch.nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        y = self.drop2d(torch.relu(self.conv(x)))
        y = F.dropout(y.clone(), 0.5, training=False)
        return self.drop(self.fc(y.flatten(1)))  # a dropout as the graph's output


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_Dropouts().eval(), (torch.zeros(1, 2, 6, 6),), name="dropouts")


def test_eval_dropout_and_copies_vanish_with_identical_numbers():
    program = _program()
    hist = program.op_histogram
    assert hist.get("aten.dropout.default") == 2 and hist.get("aten.feature_dropout.default") == 1
    ep, result = RemoveIdentityOps()(program.exported_program)
    rewritten = Program(ep, name="dropouts")
    assert result.changed == 4 and result.details["removed"] == {"clone": 1, "dropout": 2, "feature_dropout": 1}
    left = {k for k in rewritten.op_histogram if "dropout" in k or "clone" in k}
    assert left == set()
    assert rewritten.output_names == program.output_names
    x = np.random.default_rng(0).standard_normal((4, 1, 2, 6, 6)).astype(np.float32)
    for sample in x:
        np.testing.assert_array_equal(program.run(sample)[0], rewritten.run(sample)[0])
    assert program.op_histogram == hist  # the input program is untouched


def test_mcu_check_accepts_an_eval_model_with_dropout():
    assert _program().check("mcu") == []


def test_training_dropout_is_random_and_stays():
    class Train(torch.nn.Module):
        def forward(self, x):
            return F.dropout(x, 0.5, training=True)

    program = tpuedge.export(Train(), (torch.zeros(2, 8),), name="train_dropout")
    ep, result = RemoveIdentityOps()(program.exported_program)
    assert result.changed == 0 and ep is program.exported_program


def test_a_copy_written_in_place_stays():
    # torch.export keeps `y.add_(1)` as add_ on the clone: without the clone it would update x.
    class CloneThenInPlace(torch.nn.Module):
        def forward(self, x):
            y = x.clone()
            y.add_(1)
            return x * 2 + y

    program = tpuedge.export(CloneThenInPlace().eval(), (torch.ones(2),), name="clone_inplace")
    ep, result = RemoveIdentityOps()(program.exported_program)
    assert result.changed == 0
    x = np.ones(2, dtype=np.float32)
    np.testing.assert_array_equal(Program(ep, name="clone_inplace").run(x)[0], np.full(2, 4.0, np.float32))


def test_in_place_eval_dropout_vanishes_too():
    """nn.Dropout(inplace=True) (torchvision's MobileNetV3, EfficientNet, MNASNet classifiers) is
    captured as aten.dropout_; the mcu check refused it before the pass knew the in-place form."""

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.drop, self.fc2 = (
                torch.nn.Linear(8, 16),
                torch.nn.Dropout(0.2, inplace=True),
                torch.nn.Linear(16, 3),
            )

        def forward(self, x):
            return self.fc2(self.drop(torch.nn.functional.hardswish(self.fc1(x))))

    torch.manual_seed(0)
    program = tpuedge.export(Head().eval(), (torch.zeros(1, 8),), name="inplace_dropout")
    assert program.op_histogram.get("aten.dropout_.default") == 1
    ep, result = RemoveIdentityOps()(program.exported_program)
    assert result.details["removed"] == {"dropout_": 1}
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    np.testing.assert_array_equal(program.run(x)[0], Program(ep, name="h").run(x)[0])
    assert program.check("mcu") == []


class _StraightThrough(torch.nn.Module):
    """A VQ-style straight-through estimator: forward rounds, backward passes the gradient as if
    it did not: z + (round(z) - z).detach()."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        z = self.fc(x) * 3.0
        return (z + (torch.round(z) - z).detach()).sum(-1)


def test_the_rewrite_quantization_aware_training_gets_keeps_detach():
    """Old code: mcu's rewrite for training removed the detach, so the estimator's gradient was
    zero (round's) instead of the identity's; inference builds still drop it."""
    from tpuedge.edge.mcu.mcu_capability import mcu_passes
    from tpuedge.shared_ir.targets import get_target

    torch.manual_seed(0)
    module = _StraightThrough()
    x = torch.randn(2, 4)
    program = tpuedge.export(module, (x,), name="straight_through", training=True)
    trained = get_target("mcu").capability().rewrite(program.exported_program)
    assert "aten.detach.default" in {str(n.target) for n in trained.graph.nodes}
    inference, _ = mcu_passes().run(program.exported_program)
    assert "aten.detach.default" not in {str(n.target) for n in inference.graph.nodes}

    rewritten = trained.module()
    rewritten(x).sum().backward()
    module(x).sum().backward()
    got = dict(rewritten.named_parameters())["fc.weight"].grad
    assert got is not None and torch.allclose(got, module.fc.weight.grad) and got.abs().sum() > 0
