"""train_step(scheduler=...): torch's lr schedulers as optax schedules, step for step."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge.cloud
from tpuedge.shared_ir.errors import UserError
from cloud_train_helpers import rel_diff

torch.set_num_threads(1)


def _two_groups(model, kind):
    groups = [
        {"params": model.fc1.parameters()},
        {"params": list(model.fc2.parameters()) + list(model.head.parameters()), "lr": 0.02},
    ]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.05, momentum=0.9, weight_decay=1e-3)
    return torch.optim.AdamW(groups, lr=0.01, weight_decay=0.01)


SCHEDULERS = {
    "StepLR": lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5),
    "MultiStepLR": lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[3, 3, 9], gamma=0.5),
    "ConstantLR": lambda opt: torch.optim.lr_scheduler.ConstantLR(opt, factor=0.25, total_iters=5),
    "ExponentialLR": lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9),
    "CosineAnnealingLR": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=1e-3),
    "LinearLR": lambda opt: torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=6),
    "OneCycleLR": lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[0.05, 0.02], total_steps=40),
    "OneCycleLR-3phase-linear": lambda opt: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=0.05, total_steps=40, three_phase=True, anneal_strategy="linear", pct_start=0.2
    ),
    "SequentialLR-warmup-cosine": lambda opt: torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20),
        ],
        milestones=[5],
    ),
    "SequentialLR-warmup-onecycle": lambda opt: torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=3),
            torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=32),
        ],
        milestones=[4],
    ),
}


def _torch_schedule_trace(make_sched, kind, steps):
    """lr and momentum/beta1 of every param group before each of `steps` torch steps."""
    from models import MLP

    opt = _two_groups(MLP(), kind)
    sched = make_sched(opt)
    lrs, momenta = [], []
    for _ in range(steps):
        lrs.append([g["lr"] for g in opt.param_groups])
        momenta.append([g["momentum"] if kind == "sgd" else g["betas"][0] for g in opt.param_groups])
        opt.step()
        sched.step()
    return np.array(lrs), np.array(momenta)


@pytest.mark.parametrize("name", list(SCHEDULERS))
@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_scheduler_maps_to_a_schedule_that_matches_torch_every_step(name, kind):
    """The schedule functions over 36 steps (past T_max, milestones, phase ends) against torch."""
    import jax.numpy as jnp

    from models import MLP
    from tpuedge.cloud.schedules import torch_schedules

    steps = 36
    want_lr, want_m = _torch_schedule_trace(SCHEDULERS[name], kind, steps)
    opt = _two_groups(MLP(), kind)
    groups = torch_schedules(SCHEDULERS[name](opt), opt)
    got_lr = np.array([[float(g.lr(jnp.int32(i))) for g in groups] for i in range(steps)])
    np.testing.assert_allclose(got_lr, want_lr, rtol=1e-5, atol=1e-9)
    if "onecycle" in name.lower():
        got_m = np.array([[float(g.momentum(jnp.int32(i))) for g in groups] for i in range(steps)])
        np.testing.assert_allclose(got_m, want_m, rtol=1e-6)
    else:
        assert all(g.momentum is None for g in groups)


@pytest.mark.parametrize(
    "name,kind",
    [
        ("StepLR", "sgd"),
        ("CosineAnnealingLR", "adamw"),
        ("LinearLR", "adamw"),
        ("OneCycleLR", "adamw"),
        ("OneCycleLR", "sgd"),
        ("SequentialLR-warmup-cosine", "sgd"),
    ],
)
def test_train_step_with_scheduler_trains_like_torch(name, kind):
    """Per-step learning rates read back from the step, and the losses, against torch eager
    (optimizer.step(); scheduler.step() each step)."""
    from models import MLP

    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    steps = 10
    ref = copy.deepcopy(model)
    opt = _two_groups(ref, kind)
    sched = SCHEDULERS[name](opt)
    want_loss, want_lr = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(ref(x), y)
        loss.backward()
        opt.step()
        sched.step()
        want_loss.append(loss.item())
        want_lr.append([g["lr"] for g in opt.param_groups])
    ours_opt = _two_groups(model, kind)
    step = tpuedge.cloud.train_step(model, F.cross_entropy, ours_opt, (x, y), scheduler=SCHEDULERS[name](ours_opt))
    got_loss, got_lr = [], []
    for _ in range(steps):
        got_loss.append(float(step(x, y)))
        got_lr.append(step.learning_rates)
    np.testing.assert_allclose(got_lr, want_lr, rtol=1e-5, atol=1e-9)
    # lr 0.01-0.05 amplifies float rounding: without a scheduler the same runs drift ~6e-5 by step 10
    assert rel_diff(np.array(want_loss), np.array(got_loss)).max() < 2e-4, (want_loss, got_loss)
    assert len({round(v[0], 9) for v in got_lr}) > 1  # the rate really moved


def test_scheduler_errors_are_user_errors():
    import optax

    from models import MLP

    model = MLP()
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UserError, match="StepLR.*CosineAnnealingLR.*OneCycleLR.*SequentialLR") as err:
        tpuedge.cloud.train_step(
            model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9**e)
        )
    assert "LambdaLR" in str(err.value) and "set_learning_rate" in str(err.value)
    with pytest.raises(UserError, match="ReduceLROnPlateau"):
        tpuedge.cloud.train_step(
            model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        )
    other = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UserError, match="another optimizer"):
        tpuedge.cloud.train_step(
            model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.StepLR(other, 2)
        )
    with pytest.raises(UserError, match="optax schedule"):
        tpuedge.cloud.train_step(
            model, F.cross_entropy, optax.sgd(0.1), (x, y), scheduler=torch.optim.lr_scheduler.StepLR(opt, 2)
        )
    step = tpuedge.cloud.train_step(
        model,
        F.cross_entropy,
        opt,
        (x, y),
        scheduler=torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3),
    )
    with pytest.raises(UserError, match="scheduler"):
        step.set_learning_rate(0.5)
    for _ in range(3):
        step(x, y)
    with pytest.raises(UserError, match="total_steps"):
        step(x, y)


@pytest.mark.parametrize("name", ["OneCycleLR", "OneCycleLR-3phase-linear"])
def test_public_route_reads_one_cycle_from_the_state_dict(name):
    """Off the torch gate, OneCycleLR's phase table comes from the public state_dict(): the same
    schedule as the private read."""
    import jax.numpy as jnp

    from models import MLP
    from tpuedge.cloud.schedules import torch_schedules
    from tpuedge.shared_ir.upstream_gate import public_api_only

    def lrs():
        opt = _two_groups(MLP(), "sgd")
        return [[float(g.lr(jnp.int32(i))) for g in torch_schedules(SCHEDULERS[name](opt), opt)] for i in range(36)]

    fast = lrs()
    with public_api_only() as taken:
        public = lrs()
    assert "torch.optim.lr_scheduler fields" in taken
    assert public == fast


def test_public_route_names_a_scheduler_it_cannot_read():
    """SequentialLR keeps its schedulers only as objects: off the gate, a user error names it."""
    from models import MLP
    from tpuedge.cloud.schedules import torch_schedules
    from tpuedge.shared_ir.upstream_gate import public_api_only

    opt = _two_groups(MLP(), "sgd")
    with public_api_only(), pytest.raises(UserError, match="SequentialLR cannot be read on this torch release"):
        torch_schedules(SCHEDULERS["SequentialLR-warmup-cosine"](opt), opt)
