"""`.detach()` and `torch.no_grad()` in a forward stop gradients in the cloud train step as in torch.

The core-ATen decomposition writes detach as alias, which the lowering took as the identity: a
VQ-style straight-through estimator trained with round's zero gradient added in, a SimSiam-style
stop-gradient branch with gradients through it (one SGD step: weights 0.51 and 0.16 off torch's).
A teacher under `torch.no_grad()` trained along (0.016 off): the capture's disabled autocast
block made torch.export drop the grad mode of the block inside it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cloud_train_helpers import one_step


class StraightThrough(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        z = self.fc(x) * 3.0
        return z + (torch.round(z) - z).detach()


class StopGradientBranch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        p = self.fc(x)
        return p * p.detach()


class NoGradTeacher(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.teacher = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            t = self.teacher(x)
        return self.fc(x) * t


@pytest.mark.parametrize("make", [StraightThrough, StopGradientBranch, NoGradTeacher])
def test_one_sgd_step_matches_torchs(make):
    torch.manual_seed(0)
    batch = (torch.randn(8, 4), torch.randn(8, 4))
    torch_loss, loss, theirs, ours = one_step(
        make(), batch, lambda p: torch.optim.SGD(p, lr=0.1), torch.nn.functional.mse_loss
    )
    np.testing.assert_allclose(loss, torch_loss, rtol=1e-5)
    for name, value in theirs.state_dict().items():  # the teacher's too: unchanged, as in torch
        np.testing.assert_allclose(ours.state_dict()[name].numpy(), value.numpy(), atol=1e-6, err_msg=name)
