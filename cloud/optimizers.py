"""torch.optim optimizers as optax transforms, update rule for update rule.

`to_optax(optimizer, names)` reads the optimizer's param groups once (hyperparameters and which
parameters each group holds) and returns one `optax.GradientTransformation` over the IR's
parameter dict. SGD (momentum, dampening, nesterov, weight_decay, maximize), Adam and AdamW
(betas, eps, weight_decay, amsgrad, maximize) follow torch's single-tensor code path step by
step, so loss curves match torch eager to float rounding. Parameters in no param group stay
frozen. An optax transform passed instead is used as is.

Differences that remain: torch skips a parameter whose `.grad` is None (unused in the loss);
here its gradient is zero, so weight decay and moment decay still apply to it. The learning
rate is part of the optimizer state (`state["lr"]` per group: the rate the next step uses), so
it can be changed between steps without recompiling (`TrainStep.set_learning_rate`), or driven
by a torch lr scheduler mapped to a schedule of the step count (see schedules.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from tpuedge.shared_ir.errors import UserError

__all__ = ["to_optax", "torch_sgd", "torch_adam", "is_optax_transform"]


class TorchRuleState(NamedTuple):
    count: jax.Array  # steps taken (int32)
    lr: jax.Array  # float32 scalar, changeable between steps
    mu: Any  # momentum buffer / first moment (None when unused)
    nu: Any  # second moment (None when unused)
    nu_max: Any  # amsgrad's running max of nu (None when unused)


def is_optax_transform(obj: Any) -> bool:
    return hasattr(obj, "init") and hasattr(obj, "update") and callable(obj.update)


def _zeros(params):
    return jax.tree.map(jnp.zeros_like, params)


def _lr_and_momentum(state, schedule, momentum):
    """(learning rate, momentum or beta1) for the step `state.count` is about to take."""
    if schedule is None:
        return state.lr, momentum
    m = momentum if schedule.momentum is None else schedule.momentum(state.count)
    return schedule.lr(state.count), m


def _next_lr(state, schedule):
    """The lr kept in the state after a step: the next step's (what torch's param group holds)."""
    return state.lr if schedule is None else jnp.asarray(schedule.lr(state.count + 1), jnp.float32)


def _initial_lr(lr, schedule):
    return jnp.asarray(lr if schedule is None else schedule.lr(jnp.zeros((), jnp.int32)), jnp.float32)


def torch_sgd(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False, schedule=None):
    """torch.optim.SGD: g += wd*p; buf = g (first step) else m*buf + (1-d)*g; nesterov g + m*buf.
    `schedule`: a `schedules.GroupSchedule` driving lr (and momentum) by step count."""
    if nesterov and (momentum <= 0 or dampening != 0):
        raise UserError("SGD with nesterov=True needs momentum > 0 and dampening = 0 (as in torch).")

    def init(params):
        return TorchRuleState(
            jnp.zeros((), jnp.int32), _initial_lr(lr, schedule), _zeros(params) if momentum else None, None, None
        )

    def update(grads, state, params):
        if maximize:
            grads = jax.tree.map(jnp.negative, grads)
        if weight_decay:
            grads = jax.tree.map(lambda g, p: g + weight_decay * p, grads, params)
        lr_now, m = _lr_and_momentum(state, schedule, momentum)
        mu = state.mu
        if momentum:
            first = state.count == 0
            mu = jax.tree.map(lambda b, g: jnp.where(first, g, m * b + (1 - dampening) * g), state.mu, grads)
            grads = jax.tree.map(lambda g, b: g + m * b, grads, mu) if nesterov else mu
        updates = jax.tree.map(lambda g: -lr_now * g, grads)
        return updates, TorchRuleState(state.count + 1, _next_lr(state, schedule), mu, None, None)

    return optax.GradientTransformation(init, update)


def torch_adam(
    lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False, decoupled=False, schedule=None
):
    """torch.optim.Adam (L2 in the gradient) or AdamW (`decoupled=True`: p *= 1 - lr*wd first).
    `schedule`: a `schedules.GroupSchedule` driving lr (and beta1) by step count."""
    beta1, b2 = betas

    def init(params):
        return TorchRuleState(
            jnp.zeros((), jnp.int32),
            _initial_lr(lr, schedule),
            _zeros(params),
            _zeros(params),
            _zeros(params) if amsgrad else None,
        )

    def update(grads, state, params):
        if maximize:
            grads = jax.tree.map(jnp.negative, grads)
        if weight_decay and not decoupled:
            grads = jax.tree.map(lambda g, p: g + weight_decay * p, grads, params)
        lr_now, b1 = _lr_and_momentum(state, schedule, beta1)
        count = state.count + 1
        mu = jax.tree.map(lambda m, g: m + (1 - b1) * (g - m), state.mu, grads)  # torch's lerp_
        nu = jax.tree.map(lambda v, g: v * b2 + (1 - b2) * (g * g), state.nu, grads)
        t = count.astype(jnp.float32)
        step_size = lr_now / (1 - jnp.asarray(b1, jnp.float32) ** t)
        bc2_sqrt = jnp.sqrt(1 - jnp.float32(b2) ** t)
        nu_max = jax.tree.map(jnp.maximum, state.nu_max, nu) if amsgrad else None
        second = nu_max if amsgrad else nu

        def new_param(p, m, v):
            if weight_decay and decoupled:
                p = p * (1 - lr_now * weight_decay)
            return p - step_size * (m / (jnp.sqrt(v) / bc2_sqrt + eps))

        updates = jax.tree.map(lambda p, m, v: new_param(p, m, v) - p, params, mu, second)
        return updates, TorchRuleState(count, _next_lr(state, schedule), mu, nu, nu_max)

    return optax.GradientTransformation(init, update)


def _group_transform(optimizer: Any, group: Mapping[str, Any], schedule=None):
    import torch

    kind = type(optimizer)
    lr = float(group["lr"].item() if hasattr(group["lr"], "item") else group["lr"])
    if isinstance(optimizer, torch.optim.SGD):
        return torch_sgd(
            schedule=schedule,
            lr=lr,
            momentum=group.get("momentum", 0.0),
            dampening=group.get("dampening", 0.0),
            weight_decay=group.get("weight_decay", 0.0),
            nesterov=group.get("nesterov", False),
            maximize=group.get("maximize", False),
        )
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):  # AdamW subclasses Adam only in newer torch
        decoupled = isinstance(optimizer, torch.optim.AdamW) or bool(group.get("decoupled_weight_decay", False))
        return torch_adam(
            lr,
            schedule=schedule,
            betas=tuple(float(b) for b in group["betas"]),
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            amsgrad=group.get("amsgrad", False),
            maximize=group.get("maximize", False),
            decoupled=decoupled,
        )
    raise UserError(
        f"tpuedge.cloud maps torch.optim.SGD, Adam and AdamW; got {kind.__name__}. Pass an optax transform "
        "instead (e.g. optax.rmsprop(1e-3)) as the optimizer argument."
    )


def to_optax(
    optimizer: Any, names_by_param: Mapping[int, str], param_names: Sequence[str], schedules: Sequence[Any] = ()
):
    """(optax transform, trainable names). `names_by_param`: id(torch parameter) -> IR name;
    `schedules`: one `schedules.GroupSchedule` per param group (empty: constant lr).

    An optax transform passed as `optimizer` trains every parameter.
    """
    if is_optax_transform(optimizer) and not hasattr(optimizer, "param_groups"):
        return optimizer, list(param_names)
    if not hasattr(optimizer, "param_groups"):
        raise UserError(
            f"optimizer must be a torch.optim optimizer or an optax transform, got {type(optimizer).__name__}; "
            "e.g. torch.optim.AdamW(model.parameters(), lr=1e-3)."
        )
    labels: dict[str, str] = {}
    transforms: dict[str, optax.GradientTransformation] = {}
    unknown = 0
    for i, group in enumerate(optimizer.param_groups):
        label = f"group{i}"
        transforms[label] = _group_transform(optimizer, group, schedules[i] if schedules else None)
        for p in group["params"]:
            name = names_by_param.get(id(p))
            if name is None:
                unknown += 1
            elif name not in labels:
                labels[name] = label
    if unknown and not labels:
        raise UserError(
            "None of the optimizer's parameters belong to the model passed to train_step; build the "
            "optimizer from that model's parameters (torch.optim.AdamW(model.parameters(), ...))."
        )
    trainable = [n for n in param_names if n in labels]
    if len(transforms) == 1:
        return next(iter(transforms.values())), trainable
    first = next(iter(transforms))
    # labels from the tree given, so the transform also runs inside an outer multi_transform
    # (QAT's learned ranges), whose masked tree carries names this optimizer does not own
    return optax.multi_transform(transforms, lambda tree: {n: labels.get(n, first) for n in tree}), trainable
