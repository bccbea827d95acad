"""Shared by the train_step test files: a CNN, torch's own training curve, and parity runs."""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge.cloud

__all__ = ["ConvNet", "torch_curve", "parity", "one_step", "rel_diff", "adamw"]


class ConvNet(nn.Module):
    """A CNN without BatchNorm: conv, grouped conv, max pool, global average pool, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, groups=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.fc(x.mean(dim=(2, 3)))


def torch_curve(model, loss_fn, optimizer, batch, steps, n_inputs=1):
    model.train()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(*batch[:n_inputs]), *batch[n_inputs:])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.array(losses)


def parity(model, batch, make_opt, steps=20, loss_fn=F.cross_entropy, n_inputs=1):
    """(torch losses, our losses, torch model after, step) for the same start and batch."""
    ours_model, torch_model = copy.deepcopy(model), copy.deepcopy(model)
    step = tpuedge.cloud.train_step(ours_model, loss_fn, make_opt(ours_model.parameters()), batch, n_inputs=n_inputs)
    ours = np.array([float(step(*batch)) for _ in range(steps)])
    want = torch_curve(torch_model, loss_fn, make_opt(torch_model.parameters()), batch, steps, n_inputs)
    return want, ours, torch_model, step


def one_step(model, batch, make_opt, loss_fn=F.cross_entropy):
    """`parity` for one step: (torch's loss, ours, torch's model after it, ours after it)."""
    want, ours, torch_model, step = parity(model, batch, make_opt, steps=1, loss_fn=loss_fn)
    trained = copy.deepcopy(model)
    step.sync_to(trained)
    return want[0], ours[0], torch_model, trained


def rel_diff(a, b):
    return np.abs(a - b) / np.abs(a)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
