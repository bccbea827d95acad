"""tpuedge.cloud.train_step: parity with torch eager training, checkpoints, sync back, eval."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge.cloud
from tpuedge.shared_ir.errors import UserError

torch.set_num_threads(1)


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


def _torch_curve(model, loss_fn, optimizer, batch, steps, n_inputs=1):
    model.train()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(*batch[:n_inputs]), *batch[n_inputs:])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.array(losses)


def _parity(model, batch, make_opt, steps=20, loss_fn=F.cross_entropy, n_inputs=1):
    """(torch losses, our losses, torch model after, step) for the same start and batch."""
    ours_model, torch_model = copy.deepcopy(model), copy.deepcopy(model)
    step = tpuedge.cloud.train_step(ours_model, loss_fn, make_opt(ours_model.parameters()), batch, n_inputs=n_inputs)
    ours = np.array([float(step(*batch)) for _ in range(steps)])
    want = _torch_curve(torch_model, loss_fn, make_opt(torch_model.parameters()), batch, steps, n_inputs)
    return want, ours, torch_model, step


def _rel(a, b):
    return np.abs(a - b) / np.abs(a)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


def test_adamw_parity_mlp():
    from models import MLP

    torch.manual_seed(0)
    want, ours, _, _ = _parity(MLP(), (torch.randn(16, 32), torch.randint(0, 10, (16,))), adamw)
    assert _rel(want, ours).max() < 1e-5, _rel(want, ours)
    assert want[-1] < want[0] - 0.1  # it trains


def test_adamw_parity_cnn_without_batchnorm():
    torch.manual_seed(0)
    want, ours, _, _ = _parity(ConvNet(), (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))), adamw)
    assert _rel(want, ours).max() < 1e-5, _rel(want, ours)
    assert want[-1] < want[0]


def test_adamw_parity_cnn_with_batchnorm_and_running_stats():
    """MobileNet-style block: conv, depthwise conv, pointwise conv, train-mode BatchNorm, ReLU6.

    (SmallCNN is not used for the 20-step running-stat check: its max pool sits on a near-tie
    that float32 rounding flips after ~6 steps in any two implementations, routing a gradient to
    another pixel; a discrete event, not a lowering error. Its losses still match to 1e-4.)"""
    from models import DepthwiseSeparable

    torch.manual_seed(0)
    model = DepthwiseSeparable()
    want, got, ref, step = _parity(model, (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))), adamw)
    assert _rel(want, got).max() < 1e-4, _rel(want, got)
    step.sync_to(model)
    for name in ("bn_dw.running_mean", "bn_dw.running_var", "bn_pw.running_mean", "bn_pw.running_var"):
        a, b = model.get_buffer(name), ref.get_buffer(name)
        assert (a - b).abs().max() < 1e-4 * max(1.0, float(b.abs().max())), name
    assert model.bn_dw.num_batches_tracked.dtype == torch.int64 and int(model.bn_dw.num_batches_tracked) == 20
    for name, p in ref.named_parameters():
        assert (model.get_parameter(name) - p).abs().max() < 1e-4, name


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.1),
        lambda p: torch.optim.Adam(p, lr=3e-3, weight_decay=1e-3, amsgrad=True),
    ],
    ids=["sgd-nesterov-wd", "sgd-dampening", "adam-l2-amsgrad"],
)
def test_other_optimizers_match_torch(make_opt):
    from models import MLP

    torch.manual_seed(0)
    want, ours, _, _ = _parity(MLP(), (torch.randn(16, 32), torch.randint(0, 10, (16,))), make_opt, steps=10)
    assert _rel(want, ours).max() < 1e-5, _rel(want, ours)


def test_transformer_and_lstm_train_like_torch():
    from models import LSTMTagger, TransformerBlock

    def token_loss(out, y):
        return F.cross_entropy(out.flatten(0, 1), y.flatten())

    torch.manual_seed(0)
    want, ours, _, _ = _parity(
        TransformerBlock(), (torch.randn(2, 8, 64), torch.randn(2, 8, 64)), adamw, steps=5, loss_fn=F.mse_loss
    )
    assert _rel(want, ours).max() < 1e-5, _rel(want, ours)
    want, ours, _, _ = _parity(
        LSTMTagger(), (torch.randn(2, 6, 16), torch.randint(0, 5, (2, 6))), adamw, steps=5, loss_fn=token_loss
    )
    assert _rel(want, ours).max() < 1e-5, _rel(want, ours)


def test_digits_training_script_and_sync_to(digits_model):
    """What a user does: build the step, loop over batches, sync back, use the torch model."""
    import model as digits

    _, x_train, y_train, x_test, y_test = digits_model
    torch.manual_seed(0)
    net = digits.DigitsCNN()
    x_train, y_train = torch.as_tensor(x_train), torch.as_tensor(y_train).long()
    batch = 64
    step = tpuedge.cloud.train_step(
        net, F.cross_entropy, torch.optim.Adam(net.parameters(), lr=3e-3), (x_train[:batch], y_train[:batch])
    )
    order = np.random.default_rng(0).permutation(len(x_train))
    losses = []
    for epoch in range(3):
        for i in range(0, len(order) - batch + 1, batch):
            idx = torch.as_tensor(order[i : i + batch])
            losses.append(float(step(x_train[idx], y_train[idx])))
    step.sync_to(net)
    net.eval()
    with torch.no_grad():
        accuracy = (net(torch.as_tensor(x_test)).argmax(1).numpy() == np.asarray(y_test)).mean()
    assert accuracy > 0.9, accuracy
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    # eval step on the same weights and torch agree
    x_eval, y_eval = torch.as_tensor(x_test[:batch]), torch.as_tensor(y_test[:batch]).long()
    loss, outputs = step.evaluate(x_eval, y_eval)
    with torch.no_grad():
        assert abs(float(loss) - float(F.cross_entropy(net(x_eval), y_eval))) < 1e-5
        np.testing.assert_allclose(np.asarray(outputs[0]), net(x_eval).numpy(), atol=1e-4)


def test_checkpoint_roundtrip_resumes_the_same_curve():
    from models import MLP

    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.AdamW(model.parameters(), lr=1e-2), (x, y))
    for _ in range(3):
        step(x, y)
    saved = step.state_dict()
    first = [float(step(x, y)) for _ in range(3)]
    step.load_state_dict(saved)
    assert step.step_count == 3
    again = [float(step(x, y)) for _ in range(3)]
    assert first == again
    bad = dict(saved, params={"other.weight": np.zeros(3)})
    with pytest.raises(UserError, match="different model"):
        step.load_state_dict(bad)


def test_dropout_batch_split_and_learning_rate():
    """Dropout trains with the step's key; ((inputs), (targets)) batches; set_learning_rate."""
    torch.manual_seed(0)

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 16), nn.Linear(4, 16)
            self.drop = nn.Dropout(0.2)
            self.head = nn.Linear(16, 3)

        def forward(self, x1, x2):
            return self.head(self.drop(F.gelu(self.a(x1) + self.b(x2))))

    model = TwoInputs()
    x1, x2, y = torch.randn(32, 8), torch.randn(32, 4), torch.randint(0, 3, (32,))
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-2), ((x1, x2), (y,)))
    losses = [float(step((x1, x2), (y,))) for _ in range(30)]
    assert losses[-1] < 0.7 * losses[0]
    assert len(set(np.round(losses[:5], 6))) == 5  # a fresh dropout mask each step
    eval_losses = {float(step.evaluate((x1, x2), (y,))[0]) for _ in range(2)}
    assert len(eval_losses) == 1  # eval: no dropout
    step.set_learning_rate(0.0)
    params = step.state_dict()["params"]
    step((x1, x2), (y,))
    after = step.state_dict()["params"]
    assert all(np.array_equal(params[k], after[k]) for k in params)
    with pytest.raises(UserError, match="shape"):
        step((x1[:4], x2[:4]), (y[:4],))


def test_int64_labels_beyond_int32_are_refused():
    from models import MLP

    model = MLP()
    x, y = torch.randn(4, 32), torch.randint(0, 10, (4,))
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), (x, y))
    with pytest.raises(UserError, match="int32"):
        step(x, torch.tensor([0, 1, 2, 2**33]))


def test_frozen_parameters_and_optax_transforms():
    import optax

    from models import MLP

    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    # only the head is in the optimizer: the rest must not move
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.SGD(model.head.parameters(), lr=0.5), (x, y))
    before = step.state_dict()["params"]
    for _ in range(3):
        step(x, y)
    after = step.state_dict()["params"]
    assert np.array_equal(before["model.fc1.weight"], after["model.fc1.weight"])
    assert not np.array_equal(before["model.head.weight"], after["model.head.weight"])
    # an optax transform trains everything
    step = tpuedge.cloud.train_step(copy.deepcopy(model), F.cross_entropy, optax.adam(1e-2), (x, y))
    losses = [float(step(x, y)) for _ in range(10)]
    assert losses[-1] < losses[0] - 0.1


def test_lower_gives_stablehlo_and_compiles():
    from models import MLP

    model = MLP()
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.AdamW(model.parameters()), (x, y))
    lowered = step.lower()
    text = lowered.as_text()
    assert "stablehlo.dot_general" in text and "func.func public @main" in text
    compiled = lowered.compile()
    new_state, loss = compiled(step.state, *[np.asarray(x), np.asarray(y, np.int32)])
    assert abs(float(loss) - float(F.cross_entropy(model(x), y))) < 1e-5


# ---- learning-rate schedulers (torch.optim.lr_scheduler -> optax schedules) -------------------
def _two_groups(model, kind):
    groups = [{"params": model.fc1.parameters()}, {"params": list(model.fc2.parameters()) + list(model.head.parameters()), "lr": 0.02}]
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
        [torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5),
         torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)],
        milestones=[5],
    ),
    "SequentialLR-warmup-onecycle": lambda opt: torch.optim.lr_scheduler.SequentialLR(
        opt,
        [torch.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=3),
         torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=32)],
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
    [("StepLR", "sgd"), ("CosineAnnealingLR", "adamw"), ("LinearLR", "adamw"), ("OneCycleLR", "adamw"),
     ("OneCycleLR", "sgd"), ("SequentialLR-warmup-cosine", "sgd")],
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
    assert _rel(np.array(want_loss), np.array(got_loss)).max() < 2e-4, (want_loss, got_loss)
    assert len({round(v[0], 9) for v in got_lr}) > 1  # the rate really moved


def test_scheduler_errors_are_user_errors():
    import optax

    from models import MLP

    model = MLP()
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UserError, match="StepLR.*CosineAnnealingLR.*OneCycleLR.*SequentialLR") as err:
        tpuedge.cloud.train_step(model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9**e))
    assert "LambdaLR" in str(err.value) and "set_learning_rate" in str(err.value)
    with pytest.raises(UserError, match="ReduceLROnPlateau"):
        tpuedge.cloud.train_step(model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(opt))
    other = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UserError, match="another optimizer"):
        tpuedge.cloud.train_step(model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.StepLR(other, 2))
    with pytest.raises(UserError, match="optax schedule"):
        tpuedge.cloud.train_step(model, F.cross_entropy, optax.sgd(0.1), (x, y), scheduler=torch.optim.lr_scheduler.StepLR(opt, 2))
    step = tpuedge.cloud.train_step(
        model, F.cross_entropy, opt, (x, y), scheduler=torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    )
    with pytest.raises(UserError, match="scheduler"):
        step.set_learning_rate(0.5)
    for _ in range(3):
        step(x, y)
    with pytest.raises(UserError, match="total_steps"):
        step(x, y)


# ---- `tpuedge build --target cloud-tpu --train-step` compiles the training-mode step ------------
class ConvBnDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc(self.drop(x))


def _eval_capture_as_train_step():
    """What the build does with an eval-mode Program: switch it to training mode, add the loss."""
    import optax

    from tpuedge.cloud.train import TrainStep, loss_program
    from tpuedge.cloud.train_capture import training_mode_module

    torch.manual_seed(0)
    model = ConvBnDropout().eval()
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,))
    program = tpuedge.export(model, (x,), name="convbn")  # eval mode, as `tpuedge build` captures
    module, switched = training_mode_module(program)
    step = TrainStep.from_program(loss_program(module, F.cross_entropy, ((x,), (y,))), optax.sgd(0.0), n_inputs=1)
    return model, x, y, step, switched


def test_training_mode_module_runs_batchnorm_and_dropout_as_torch_train_mode():
    model, x, y, step, switched = _eval_capture_as_train_step()
    assert not model.training and switched == {"batch_norm": 1, "dropout": 1}
    assert {"model.bn.running_mean", "model.bn.running_var"} <= set(step.jax_program.mutated_buffers)
    losses = [float(step(x, y)) for _ in range(3)]  # lr 0: only dropout's mask changes the loss
    assert len(set(losses)) == 3
    # running statistics: what torch train-mode BatchNorm leaves after the same 3 batches
    once = copy.deepcopy(model).train()
    with torch.no_grad():
        for _ in range(3):
            once(x)
    mean = step.state["buffers"]["model.bn.running_mean"]
    np.testing.assert_allclose(np.asarray(mean), once.bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(step.state["buffers"]["model.bn.running_var"]), once.bn.running_var.numpy(), rtol=1e-5)
    text = step.lower().as_text()
    assert "threefry" in text  # dropout's random bits are in the compiled step


@pytest.mark.skipif(
    __import__("tpuedge.cloud.tpu_compile", fromlist=["x"]).libtpu_unavailable_reason() is not None,
    reason="libtpu is not installed (pip install 'tpuedge[tpu]')",
)
def test_build_train_step_compiles_the_training_mode_capture_for_tpu(tmp_path):
    from jax.sharding import Mesh

    from tpuedge.cloud import tpu_compile
    from tpuedge.cloud.topologies import parse_topology

    torch.manual_seed(0)
    program = tpuedge.export(ConvBnDropout().eval(), (torch.randn(8, 3, 8, 8),), name="convbn")
    artifact = tpuedge.build(program, "cloud-tpu", tmp_path / "convbn", train_step=True, loss="cross_entropy")
    train = artifact.tpu_compile["programs"]["train_step"]
    assert train["mode"] == "train" and train["ops_switched_to_train_mode"] == {"batch_norm": 1, "dropout": 1}
    # the same step through the real XLA:TPU compiler: its HLO draws dropout's bits and writes BN stats
    *_, step, _ = _eval_capture_as_train_step()
    devices = tpu_compile.topology_devices(parse_topology("v5e:2x2"))
    hlo = step.lower(Mesh(np.array(devices), ("data",))).compile().as_text()
    assert "threefry" in hlo


# ---- bf16: bf16 compute, f32 master weights and optimizer state --------------------------------
def _autocast_curve(model, x, y, steps):
    model = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


@pytest.mark.parametrize("name", ["MLP", "SmallCNN"])
def test_bf16_trains_like_torch_autocast(name):
    """20 AdamW steps against torch.autocast('cpu', torch.bfloat16) training; measured 7e-5 (MLP) and
    2e-4 (SmallCNN: train-mode BatchNorm on bf16 activations) relative, the issue's bound is 1e-2."""
    import models

    torch.manual_seed(0)
    model = getattr(models, name)()
    x = torch.randn(64, 32) if name == "MLP" else torch.randn(16, 3, 32, 32)
    y = torch.randint(0, 10, (x.shape[0],))
    want = _autocast_curve(model, x, y, 20)
    ours_model = copy.deepcopy(model)
    step = tpuedge.cloud.train_step(
        ours_model, F.cross_entropy, torch.optim.AdamW(ours_model.parameters(), lr=1e-3), (x, y), precision="bf16"
    )
    got = np.array([float(step(x, y)) for _ in range(20)])
    assert _rel(want, got).max() < 1e-2, _rel(want, got)
    assert want[-1] < want[0]
    # bf16 compute: the matmuls / convolutions of the step take bf16 operands ...
    text = step.lower().as_text()
    heavy = "stablehlo.convolution" if name == "SmallCNN" else "stablehlo.dot_general"
    assert any(heavy in line and "bf16" in line for line in text.splitlines()), heavy
    # ... while the master weights and the optimizer state stay f32
    leaves = list(step.state["params"].values()) + [
        v for v in __import__("jax").tree_util.tree_leaves(step.state["opt_state"]) if np.issubdtype(v.dtype, np.floating)
    ]
    assert {str(v.dtype) for v in leaves} == {"float32"}


def test_unknown_precision_is_a_user_error():
    from models import MLP

    model = MLP()
    with pytest.raises(UserError, match="bf16"):
        tpuedge.cloud.train_step(
            model, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), (torch.randn(4, 32), torch.randint(0, 10, (4,))), precision="fp8"
        )


# ---- speed: the max-pool gradient (issue 12 item 8) ----------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, dilation=2), dict(kernel_size=3, stride=2, ceil_mode=True)],
    ids=["2x2", "3x3-s2-p1", "dilated", "ceil"],
)
def test_max_pool_gradient_goes_to_the_first_maximum_as_torch(kwargs):
    """Ties (a quantized-looking input) are where implementations differ: torch routes each
    window's gradient to its first maximum."""
    import jax

    class Pool(nn.Module):
        def forward(self, x, w):
            return (F.max_pool2d(x, **kwargs) * w).sum()

    x = torch.randint(0, 3, (2, 3, 9, 9)).float()  # many ties
    w_shape = F.max_pool2d(x, **kwargs).shape
    w = torch.randn(w_shape)
    jp = tpuedge.cloud.to_jax(tpuedge.export(Pool(), (x, w)))
    grad = jax.grad(lambda xv: jp(jp.params, jp.buffers, xv, np.asarray(w))[1][0])(np.asarray(x))
    xt = x.clone().requires_grad_(True)
    (F.max_pool2d(xt, **kwargs) * w).sum().backward()
    np.testing.assert_allclose(np.asarray(grad), xt.grad.numpy(), atol=1e-6)


def test_cnn_train_step_has_no_reduce_window_max_gradient():
    """jax's reduce_window-max VJP (a variadic reduce-window over four iotas) was a third of
    SmallCNN's train step on XLA:CPU; the max pool's gradient is now selects and pads."""
    from models import SmallCNN

    model = SmallCNN()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.AdamW(model.parameters()), (x, y))
    hlo = step.lower().compile().as_text()
    assert "reduce-window(" not in hlo


def test_batch_norm_closed_form_gradient_matches_torch():
    """Train-mode BatchNorm's gradient is the closed form (two reductions), not autodiff through
    both statistics' passes; it must still be torch's for the input, weight and bias."""
    import jax

    class BN(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(6)

        def forward(self, x, w):
            return (self.bn(x) * w).sum()

    torch.manual_seed(0)
    model = BN()
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.5, 0.5)
    x, w = torch.randn(4, 6, 5, 5) * 3 + 1, torch.randn(4, 6, 5, 5)
    jp = tpuedge.cloud.to_jax(tpuedge.export(model, (x, w), training=True))

    def loss(params, xv):
        return jp(params, jp.buffers, xv, np.asarray(w))[1][0]

    g_params, g_x = jax.grad(loss, argnums=(0, 1))(jp.params, np.asarray(x))
    xt = x.clone().requires_grad_(True)
    (model.train()(xt, w)).backward()
    np.testing.assert_allclose(np.asarray(g_x), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(g_params["bn.weight"]), model.bn.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(g_params["bn.bias"]), model.bn.bias.grad.numpy(), rtol=1e-4, atol=1e-5)


# ---- the device that is present (issue 12 item 7) -----------------------------------------------
def _gpu_reason():
    import jax

    if jax.default_backend() != "gpu":
        return f"no GPU: JAX's default backend is {jax.default_backend()} (bench/device_check.sh runs these with JAX_PLATFORMS=cuda)"
    if not torch.cuda.is_available():
        return "no CUDA torch build to compare with"
    return None


def test_cloud_artifact_is_exported_for_cuda_and_runs_on_jax_default_device(tmp_path):
    import jax

    from models import build_mlp

    module, inputs = build_mlp()
    program = tpuedge.export(module, inputs, name="mlp")
    tpuedge.build(program, "cloud-tpu", tmp_path / "mlp")
    artifact = tpuedge.load(tmp_path / "mlp")
    assert "cuda" in artifact.exported.platforms and "tpu" in artifact.exported.platforms
    assert artifact.device == jax.devices()[0]
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(artifact.run(x)[0], program.run(x)[0], atol=1e-5)


@pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))
def test_on_gpu_training_and_artifacts_use_the_gpu(tmp_path):
    from models import MLP, build_mlp

    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
    import jax

    ours_model = copy.deepcopy(model)
    step = tpuedge.cloud.train_step(ours_model, F.cross_entropy, adamw(ours_model.parameters()), (x, y))
    with jax.default_matmul_precision("highest"):  # XLA:GPU may take TF32 for f32 dots; torch's matmuls don't
        got = np.array([float(step(x, y)) for _ in range(10)])
    assert {d.platform for d in step.state["params"]["model.fc1.weight"].devices()} == {"gpu"}
    ref = copy.deepcopy(model).cuda()
    want = _torch_curve(ref, F.cross_entropy, adamw(ref.parameters()), (x.cuda(), y.cuda()), 10)
    assert _rel(want, got).max() < 1e-4, _rel(want, got)
    module, inputs = build_mlp()
    program = tpuedge.export(module, inputs, name="mlp")
    tpuedge.build(program, "cloud-tpu", tmp_path / "mlp")
    artifact = tpuedge.load(tmp_path / "mlp")
    assert artifact.device.platform == "gpu"
    sample = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(artifact.run(sample)[0], program.run(sample)[0], atol=1e-4)
