"""`train_step(model, loss_fn, optimizer, example_batch)`: the front door of cloud training.

It captures model and loss (tpuedge.cloud.train_capture), maps the optimizer and scheduler to
optax, and returns a `TrainStep` (tpuedge.cloud.train), with `quantize="int8"` a
`QatTrainStep` (tpuedge.cloud.qat), or with `lora=LoraConfig(...)` a `LoraTrainStep`
(tpuedge.cloud.lora_step). See tpuedge.cloud.train's docstring for how a step works,
tpuedge.cloud.train_checkpoint for checkpoints and tpuedge.cloud.distributed for jobs of
several processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tpuedge.cloud import distributed
from tpuedge.cloud.interpreter import to_jax
from tpuedge.cloud.optimizers import to_optax
from tpuedge.cloud.schedules import torch_schedules
from tpuedge.cloud.train import MODEL_PREFIX, TrainStep
from tpuedge.cloud.train_capture import loss_program, split_batch
from tpuedge.shared_ir.errors import UserError

__all__ = ["train_step"]


def train_step(
    model,
    loss_fn: Callable,
    optimizer: Any,
    example_batch: Sequence[Any],
    mesh: Any = None,
    *,
    n_inputs: int | None = None,
    seed: int = 0,
    scheduler: Any = None,
    precision: str = "f32",
    quantize: Any = None,
    lora: Any = None,
    resume: Any = None,
) -> TrainStep:
    """Build a jitted training step for `model` (see the module docstring).

    model: a torch.nn.Module (its current weights are the starting point).
    loss_fn: torch code `loss_fn(outputs, *targets) -> scalar` (a function or an nn.Module).
    optimizer: torch.optim.SGD / Adam / AdamW over the model's parameters (hyperparameters read
        once), or an optax transform.
    example_batch: `(inputs..., targets...)` with `n_inputs` inputs (default 1), or
        `((inputs...), (targets...))`; its shapes are the step's shapes.
    mesh: None, "data:8", "fsdp:8", "data:2,fsdp:4" or a jax Mesh (see `tpuedge.cloud.mesh`).
    scheduler: a torch.optim.lr_scheduler scheduler of `optimizer` (StepLR, MultiStepLR,
        ConstantLR, LinearLR, ExponentialLR, CosineAnnealingLR, OneCycleLR, SequentialLR), stepped
        once per train step on device (see `tpuedge.cloud.schedules`).
    precision: "f32", or "bf16": bf16 compute (the step is captured under torch's CPU autocast,
        so matmuls and convolutions run in bf16 and autocast's f32 ops stay f32) with f32 master
        weights, gradients and optimizer state. Matches torch autocast training within 1e-2.
    quantize: None, or "int8" (an int8 QuantConfig, a cloud.qat.QatConfig) for quantization-aware training: the
        forward fakes the edge targets' int8 and `step.program()` carries the trained ranges
        (see `tpuedge.cloud.qat`).
    lora: None, or a `tpuedge.cloud.LoraConfig`: train low-rank adapters of the weights it
        targets, the base weights frozen; `step.merged_program()` folds them in (see
        `tpuedge.cloud.lora_step`).
    resume: None, or a checkpoint folder: start from its newest checkpoint when it has one (the
        state, `step.data_position`), and save there when the job gets SIGTERM (see
        `tpuedge.cloud.train_checkpoint`).

    In a job of several processes (tpuedge.cloud.distributed) every process calls this with its
    own share of the batch; the step's global batch is all the shares stacked on dim 0.
    """
    distributed.join_launched_job()
    step = _build(model, loss_fn, optimizer, example_batch, mesh, n_inputs, seed, scheduler, precision, quantize, lora)
    if resume is not None:
        step.resume(resume)
    return step


def _build(
    model, loss_fn, optimizer, example_batch, mesh, n_inputs, seed, scheduler, precision, quantize, lora
) -> TrainStep:
    flat, n = split_batch(example_batch, n_inputs)
    flat = distributed.global_example(flat)
    schedules = torch_schedules(scheduler, optimizer)
    limits = [s.max_steps for s in schedules if s.max_steps is not None]
    common = dict(mesh=mesh, seed=seed, scheduled=bool(schedules), max_steps=min(limits) if limits else None)
    if lora is not None:
        if quantize is not None:
            raise UserError(
                "train_step takes lora= or quantize=, not both: quantization-aware training trains every weight. "
                "Fine-tune with LoRA first, then quantize step.merged_program() when you build it."
            )
        from tpuedge.cloud.lora_step import lora_train_step

        return lora_train_step(
            model, loss_fn, optimizer, flat, n, lora, precision=precision, schedules=schedules, **common
        )
    if quantize is not None:
        from tpuedge.cloud.qat import qat_config, qat_train_step

        config = qat_config(quantize, precision)
        return qat_train_step(
            model,
            loss_fn,
            lambda params, names: to_optax(optimizer, names, params, schedules),
            flat[:n],
            flat[n:],
            config,
            **common,
        )
    program = loss_program(model, loss_fn, flat, n, precision=precision)
    jp = to_jax(program)
    if len(jp.outputs) != 1:
        raise UserError("loss_fn must return one scalar tensor; reduce it with .mean() or .sum().")
    names_by_param = {id(p): MODEL_PREFIX + name for name, p in model.named_parameters()}
    tx, trainable = to_optax(optimizer, names_by_param, list(jp.params), schedules)
    return TrainStep(
        jp,
        tx,
        trainable,
        n_inputs=n,
        eval_program_factory=lambda: loss_program(model, loss_fn, flat, n, training=False, precision=precision),
        **common,
    )
