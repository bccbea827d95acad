"""torch.optim.lr_scheduler schedulers as optax schedules (functions of the step count).

`torch_schedules(scheduler, optimizer)` reads the scheduler once and returns, per param group,
the learning rate as a function of the number of train steps taken (and, for OneCycleLR's
`cycle_momentum`, the momentum / Adam beta1 as well). The train step evaluates them on device
at its own step counter, so a schedule costs no recompile and no host round trip.

Step semantics: the scheduler advances once per train step, as in the usual torch loop
`optimizer.step(); scheduler.step()`. Train step `i` (0-based) therefore uses what torch's
`scheduler.get_last_lr()` says after `i` `scheduler.step()` calls (from the scheduler's state
when `train_step` is built). For a schedule meant per epoch, give its sizes in steps
(e.g. `StepLR(opt, step_size=epochs_per_decay * steps_per_epoch)`).

The closed forms below are torch's (`_get_closed_form_lr` where torch has one, OneCycleLR's
phase table otherwise); torch's recursive updates agree with them up to float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.torch_compat import scheduler_field, sequential_schedulers
from tpuedge.shared_ir.upstream_gate import Unavailable

__all__ = ["GroupSchedule", "SUPPORTED_SCHEDULERS", "torch_schedules"]

SUPPORTED_SCHEDULERS = (
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "OneCycleLR",
    "SequentialLR",
)

Schedule = Callable[[Any], Any]  # step count (int32 array) -> float32 value, as optax.Schedule


@dataclass(frozen=True)
class GroupSchedule:
    """One param group's schedule: `lr(count)`, and `momentum(count)` (SGD momentum or Adam
    beta1) when the scheduler cycles it, else None. `max_steps`: train steps the scheduler
    allows (OneCycleLR's total_steps), None for unbounded."""

    lr: Schedule
    momentum: Schedule | None = None
    max_steps: int | None = None


def _f32(t):
    return jnp.asarray(t, jnp.float32)


# ---- one scheduler, as a function of its own epoch counter `e` -----------------------------------
def _closed_form(sched, base: float, group: dict) -> tuple[Schedule, Schedule | None, int | None]:
    name = type(sched).__name__
    if name == "StepLR":
        size, gamma = int(sched.step_size), float(sched.gamma)
        return (lambda e: base * jnp.float32(gamma) ** (e // size).astype(jnp.float32)), None, None
    if name == "MultiStepLR":
        marks = jnp.asarray(sorted(sched.milestones.elements()), jnp.int32)
        gamma = float(sched.gamma)
        return (
            (lambda e: base * jnp.float32(gamma) ** jnp.searchsorted(marks, e, side="right").astype(jnp.float32)),
            None,
            None,
        )
    if name == "ConstantLR":
        factor, total = float(sched.factor), int(sched.total_iters)
        return (lambda e: jnp.where(e >= total, jnp.float32(base), jnp.float32(base * factor))), None, None
    if name == "LinearLR":
        start, end, total = float(sched.start_factor), float(sched.end_factor), int(sched.total_iters)
        return (lambda e: base * (start + (end - start) * _f32(jnp.minimum(e, total)) / total)), None, None
    if name == "ExponentialLR":
        gamma = float(sched.gamma)
        return (lambda e: base * jnp.float32(gamma) ** _f32(e)), None, None
    if name == "CosineAnnealingLR":
        t_max, eta = float(sched.T_max), float(sched.eta_min)
        return (lambda e: eta + (base - eta) * (1 + jnp.cos(jnp.float32(math.pi) * _f32(e) / t_max)) / 2), None, None
    if name == "OneCycleLR":
        return _one_cycle(sched, group)
    raise UserError(_unsupported(sched))


def _field(scheduler, name: str, default=Unavailable):
    """A field torch keeps private (shared_ir/torch_compat.py reads it), or the user's error."""
    try:
        return scheduler_field(scheduler, name, default)
    except Unavailable:
        raise _unreadable(scheduler, name) from None


def _unreadable(scheduler, name: str) -> UserError:
    return UserError(
        f"{type(scheduler).__name__} cannot be read on this torch release: its {name} has no public "
        "accessor, and the release is not one tpuedge verified (see torch in pyproject.toml). "
        "Use a supported torch, or a scheduler without it (StepLR, MultiStepLR, CosineAnnealingLR, ...)."
    )


def _one_cycle(sched, group: dict) -> tuple[Schedule, Schedule | None, int]:
    """torch's phase table: each phase anneals (cos or linear) from its start to its end value."""
    phases = [
        (float(p["end_step"]), group[p["start_lr"]], group[p["end_lr"]], p["start_momentum"], p["end_momentum"])
        for p in _field(sched, "_schedule_phases")
    ]
    cosine = _field(sched, "_anneal_func_type", "cos") == "cos"

    def anneal(start, end, pct):
        if cosine:
            return end + (start - end) / 2.0 * (jnp.cos(jnp.float32(math.pi) * pct) + 1)
        return (end - start) * pct + start

    def piecewise(values: Sequence[tuple[float, float]]) -> Schedule:
        def at(e):
            step = _f32(e)
            result, start_step = None, 0.0
            for (end_step, *_), (start, end) in zip(phases, values):
                value = anneal(start, end, (step - start_step) / (end_step - start_step))
                # the first phase whose end is not passed wins; the last one takes the rest
                result = value if result is None else jnp.where(step <= start_step, result, value)
                start_step = end_step
            return result

        return at

    lr = piecewise([(p[1], p[2]) for p in phases])
    momentum = None
    if sched.cycle_momentum:
        momentum = piecewise([(group[p[3]], group[p[4]]) for p in phases])
    return lr, momentum, int(sched.total_steps)


def _unsupported(sched) -> str:
    name = type(sched).__name__
    return (
        f"train_step(scheduler=...) maps torch.optim.lr_scheduler {', '.join(SUPPORTED_SCHEDULERS)}; got {name}. "
        "For LambdaLR, ReduceLROnPlateau or your own rule, leave scheduler unset and call "
        "step.set_learning_rate(lr) between steps (no recompile), or pass an optax transform with an optax schedule."
    )


# ---- the public mapping ----------------------------------------------------------------------------
def torch_schedules(scheduler: Any, optimizer: Any) -> list[GroupSchedule]:
    """One GroupSchedule per param group of `optimizer`, counting train steps from 0 = now."""
    if scheduler is None:
        return []
    if not hasattr(scheduler, "optimizer") or not hasattr(scheduler, "last_epoch"):
        raise UserError(
            f"scheduler must be a torch.optim.lr_scheduler scheduler; got {type(scheduler).__name__}. {_unsupported(scheduler)}"
        )
    if not hasattr(optimizer, "param_groups"):
        raise UserError(
            "scheduler= maps a torch scheduler onto the torch optimizer it drives; with an optax transform, "
            "put an optax schedule inside it instead (e.g. optax.adamw(optax.cosine_decay_schedule(1e-3, 1000)))."
        )
    if scheduler.optimizer is not optimizer:
        raise UserError(
            "The scheduler drives another optimizer than the one passed to train_step; build it on that optimizer, "
            "e.g. torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)."
        )
    groups = optimizer.param_groups
    offset = int(scheduler.last_epoch)  # scheduler steps already taken
    name = type(scheduler).__name__
    if name not in SUPPORTED_SCHEDULERS:
        raise UserError(_unsupported(scheduler))
    if name != "SequentialLR":
        out = []
        for base, group in zip(scheduler.base_lrs, groups):
            lr, momentum, total = _closed_form(scheduler, float(base), group)
            out.append(_shifted(lr, momentum, total, offset))
        return out
    return [_sequential(scheduler, i, group, offset) for i, group in enumerate(groups)]


def _shifted(lr, momentum, total, offset) -> GroupSchedule:
    limit = None if total is None else max(total - offset, 0)
    return GroupSchedule(
        lr=lambda n: lr(n + offset),
        momentum=None if momentum is None else (lambda n: momentum(n + offset)),
        max_steps=limit,
    )


def _sequential(scheduler, index: int, group: dict, offset: int) -> GroupSchedule:
    """SequentialLR: segment k runs its scheduler from epoch 0 at milestone k-1. The first
    segment starts from the group's `initial_lr` (torch resets the lr to it and steps the first
    scheduler recursively from there); later ones restart with their closed form at 0."""
    try:
        subs = sequential_schedulers(scheduler)
    except Unavailable:
        raise _unreadable(scheduler, "_schedulers") from None
    marks = [int(m) for m in _field(scheduler, "_milestones")]
    parts = []
    for k, sub in enumerate(subs):
        if type(sub).__name__ not in SUPPORTED_SCHEDULERS or type(sub).__name__ == "SequentialLR":
            raise UserError(_unsupported(sub) + " (inside SequentialLR; SequentialLR does not nest)")
        base = float(group["initial_lr"]) if k == 0 else float(sub.base_lrs[index])
        parts.append(_closed_form(sub, base, group))
    starts = [0] + marks
    # torch leaves a cycled momentum where it was outside the cycling scheduler's segment
    initial_momentum = group.get("momentum", group.get("betas", (None,))[0])

    def select(values: Sequence[Schedule | None], carry_from: Any) -> Schedule:
        def at(e):
            result = None if carry_from is None else jnp.float32(carry_from)
            for k, (fn, start) in enumerate(zip(values, starts)):
                end = starts[k + 1] if k + 1 < len(starts) else None
                if fn is None:
                    continue
                local = e - start
                if end is not None:  # after its segment, the last value it set stays
                    local = jnp.minimum(local, end - start - 1)
                value = fn(local)
                result = value if result is None else jnp.where(e >= start, value, result)
            return result

        return at

    def lr_at(e):
        k = jnp.searchsorted(jnp.asarray(marks, jnp.int32), e, side="right")
        values = jnp.stack([fn(e - start) for (fn, _, _), start in zip(parts, starts)])
        return values[k]

    momenta = [m for _, m, _ in parts]
    momentum = select(momenta, initial_momentum) if any(m is not None for m in momenta) else None
    # a bounded scheduler caps the run only as the last segment (earlier ones end at their milestone)
    last_total = parts[-1][2]
    limit = None if last_total is None else starts[-1] + last_total
    return _shifted(lr_at, momentum, limit, offset)
