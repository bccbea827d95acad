"""Quantization-aware training: `train_step(..., quantize="int8")`.

The model is captured alone (training mode) and the loss alone, and the two are composed in
JAX, so the fake int8 sits exactly where the edge int8 graph quantizes: at the model's
`quant_points` (the IR decision in quantize/activation_ranges.py), with per-channel int8
weights. Gradients pass straight through the rounding.

Activation ranges are training state (buffers named "qat_range.<node>"): the first step takes
each point's batch [min, max]; later steps move them by an exponential moving average
(`ema_decay`). Evaluation fakes int8 with the ranges as they stand.

`step.program()` is the trained model's eval-mode Program carrying those ranges: an mcu or
android int8 build of it needs no calibration data and uses exactly them.

A BatchNorm after a convolution is folded into it first, as the int8 graph folds it
(cloud/qat_batchnorm.py): the step trains a copy of the model without those BatchNorms.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.cloud.fake_quant import FakeQuantHook
from tpuedge.cloud.interpreter import JaxProgram, host_to_jax, to_jax
from tpuedge.cloud.train import MODEL_PREFIX, TrainStep
from tpuedge.quantize.activation_ranges import QuantPoints, quant_points
from tpuedge.shared_ir.node_ranges import ActivationRanges
from tpuedge.shared_ir.errors import UserError

__all__ = ["QatConfig", "QatTrainStep", "qat_config", "qat_train_step", "RANGE_PREFIX"]

RANGE_PREFIX = "qat_range."
_KNOWN = "qat_ranges_known"
_FOLDED_BEFORE_QAT = ("batch_norm", "_native_batch_norm")


def _check_supported(program) -> None:
    for node in program.exported_program.graph.nodes:
        if node.op == "call_function" and any(k in str(node.target) for k in _FOLDED_BEFORE_QAT):
            from tpuedge.shared_ir.sources import node_source

            raise UserError(
                f"quantize='int8' training can't take this BatchNorm ({node.name}, {node_source(node) or 'no source line'}): "
                "QAT folds a BatchNorm into the convolution whose output it rescales, as the int8 graph does, and this one "
                "follows no convolution of its own (or its module runs twice). Fold or remove it in the float model "
                "before training with quantize='int8'."
            )


class _LossOf:
    """`forward(output, *targets) = loss_fn(output, *targets)`, as a module to capture."""

    @staticmethod
    def module(loss_fn):
        import torch

        class LossOf(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.loss_fn = loss_fn

            def forward(self, output, *targets):
                return self.loss_fn(output, *targets)

        return LossOf()


def _model_state(state: dict) -> dict:
    """The model's own entries of a step's params or buffers, without the "model." prefix."""
    return {k[len(MODEL_PREFIX) :]: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}


@dataclass(eq=False)  # hashed by identity, so jax.jit closes over it
class QatLossProgram:
    """Model (fake int8) then loss, with JaxProgram's call convention for `TrainStep`."""

    model: JaxProgram
    loss: JaxProgram
    plan: QuantPoints
    ema_decay: float
    learned: bool = False
    params: dict = field(init=False)
    buffers: dict = field(init=False)

    def __post_init__(self):
        self.params = {MODEL_PREFIX + k: v for k, v in self.model.params.items()}
        self.buffers = {MODEL_PREFIX + k: v for k, v in self.model.buffers.items()}
        for p in self.plan.points:  # learned ranges are parameters (fixed ones never are)
            state = self.params if self.learned and p not in self.plan.fixed else self.buffers
            state[RANGE_PREFIX + p] = jnp.asarray(self.plan.fixed.get(p, (0.0, 0.0)), jnp.float32)
        self.buffers[_KNOWN] = jnp.zeros((), jnp.bool_)
        self.inputs = list(self.model.inputs) + list(self.loss.inputs[1:])
        self.outputs = list(self.loss.outputs)

    def model_outputs(self, params, buffers, *inputs, rng_key=None, update: bool = False, integer: bool = False):
        """(new buffers, model outputs) with int8 faked; `update` moves the ranges (training);
        `integer` computes the points whose int8 kernel is known with its arithmetic (the eval)."""
        model_params, model_buffers = _model_state(params), _model_state(buffers)
        ranges = {p: {**buffers, **params}[RANGE_PREFIX + p] for p in self.plan.points}
        known = buffers[_KNOWN]
        hook = FakeQuantHook(self.plan, ranges, use_batch=jnp.logical_not(known), learned=self.learned, integer=integer)
        new_model_buffers, outputs = self.model.call_transformed(
            model_params, model_buffers, *inputs, rng_key=rng_key, transform=hook
        )
        new_buffers = dict(buffers)
        new_buffers.update({MODEL_PREFIX + k: v for k, v in new_model_buffers.items()})
        if update and not self.learned:
            for point, batch in hook.observed.items():
                moved = self.ema_decay * ranges[point] + (1.0 - self.ema_decay) * batch
                new_buffers[RANGE_PREFIX + point] = jnp.where(known, moved, batch)
            new_buffers[_KNOWN] = jnp.ones((), jnp.bool_)
        return new_buffers, outputs

    def start_ranges(self, *inputs) -> None:
        """Learned ranges start at these inputs' batch min/max (one eval-free forward)."""
        hook = FakeQuantHook(self.plan, {}, use_batch=True)
        self.model.call_transformed(
            _model_state(self.params), _model_state(self.buffers), *inputs, rng_key=jax.random.key(0), transform=hook
        )
        for point, batch in hook.observed.items():
            self.params[RANGE_PREFIX + point] = batch
        self.buffers[_KNOWN] = jnp.ones((), jnp.bool_)

    def __call__(self, params, buffers, *batch, rng_key=None):
        n = len(self.model.inputs)
        new_buffers, outputs = self.model_outputs(params, buffers, *batch[:n], rng_key=rng_key, update=True)
        _, loss = self.loss({}, {}, outputs[0], *batch[n:], rng_key=rng_key)
        return new_buffers, loss


class QatTrainStep(TrainStep):
    """A `TrainStep` whose forward fakes int8; adds `quantized_outputs` and `program()`.
    `evaluate(*batch)` gives the eval-mode (loss, outputs) with int8 faked at the current ranges,
    in the int8 kernels' own arithmetic where it is known (cloud/int8_arithmetic.py)."""

    def __init__(
        self,
        qat: QatLossProgram,
        tx,
        trainable,
        *,
        model,
        example_inputs,
        evaluator: QatLossProgram,
        target: str | None,
        folded_batchnorm: Sequence[tuple[str, str]] = (),
        **kwargs,
    ):
        super().__init__(qat, tx, trainable, n_inputs=len(example_inputs), **kwargs)
        self._target = target
        self._model = model  # the user's model, or its copy with BatchNorm folded in
        self.folded_batchnorm = list(folded_batchnorm)  # (convolution, BatchNorm) module paths
        self._example_inputs = tuple(example_inputs)
        self._evaluator = evaluator  # the eval-mode capture (no dropout), the same ranges and weights

        def evaluate(params, buffers, *batch):
            n = len(evaluator.model.inputs)
            _, outputs = evaluator.model_outputs(params, buffers, *batch[:n], rng_key=jax.random.key(0), integer=True)
            if len(batch) == n:
                return None, outputs
            return evaluator.loss({}, {}, outputs[0], *batch[n:], rng_key=jax.random.key(0))[1][0], outputs

        self._eval_jitted = jax.jit(evaluate)

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        """The trained [min, max] of every quantization point (host floats)."""
        host = jax.device_get({**self.state["buffers"], **self.state["params"]})
        return {
            k[len(RANGE_PREFIX) :]: (float(v[0]), float(v[1])) for k, v in host.items() if k.startswith(RANGE_PREFIX)
        }

    def quantized_outputs(self, *inputs: Any) -> list[np.ndarray]:
        """The model's outputs with int8 faked at the trained ranges (eval: no range update)."""
        if not bool(jax.device_get(self.state["buffers"][_KNOWN])):
            raise UserError("No training step has run yet, so there are no activation ranges to fake int8 with.")
        specs = self._evaluator.model.inputs
        arrays = [host_to_jax(v, s.name) for v, s in zip(inputs, specs)]
        if len(arrays) != len(specs) or any(tuple(a.shape) != tuple(s.shape) for a, s in zip(arrays, specs)):
            raise UserError(
                f"quantized_outputs takes the step's input shapes ({', '.join(s.describe() for s in specs)}), got "
                f"{[list(a.shape) for a in arrays]}; feed batches of the training batch size."
            )
        return [np.asarray(o) for o in self._eval_jitted(self.state["params"], self.state["buffers"], *arrays)[1]]

    def trained_module(self):
        """A copy of the trained model (with BatchNorm folded into its convolutions, if it had any)."""
        model = copy.deepcopy(self._model)
        super().sync_to(model)
        return model

    def sync_to(self, model) -> None:
        import torch

        if self.folded_batchnorm and not all(
            isinstance(model.get_submodule(bn), torch.nn.Identity) for _, bn in self.folded_batchnorm
        ):
            raise UserError(
                "This QAT step trained the model with its BatchNorm folded into the convolutions before them "
                f"({', '.join(f'{bn} into {conv}' for conv, bn in self.folded_batchnorm)}), as the int8 graph holds "
                "them, so its parameters don't fit the model's BatchNorm layers. Take step.trained_module() (a torch "
                "copy) or step.program() (to build) instead."
            )
        super().sync_to(model)

    def program(self, batch_size: int | None = None):
        """The trained model's eval-mode Program, carrying the trained activation ranges;
        `batch_size` re-captures it for another batch (1 for a device), else the example's."""
        from tpuedge.shared_ir.capture import export

        ranges = self.ranges
        if not bool(jax.device_get(self.state["buffers"][_KNOWN])):
            raise UserError("No training step has run yet: train the step before taking its program().")
        model = self.trained_module()
        inputs = (
            self._example_inputs
            if batch_size is None
            else tuple(x[:1].expand(batch_size, *x.shape[1:]) for x in self._example_inputs)
        )
        program = _rewritten(export(model.eval(), inputs, name=type(model).__name__.lower()), self._target)
        points = quant_points(program)
        if points.points != self._evaluator.plan.points:
            raise UserError(
                "The trained model's eval-mode graph quantizes at other nodes than the one training faked "
                f"({', '.join(sorted(set(points.points) ^ set(self._evaluator.plan.points)))}); keep its forward free of "
                "data-dependent branches so both captures agree."
            )
        return program.with_activation_ranges(ActivationRanges({p: ranges[p] for p in points.points}))


def qat_train_step(
    model,
    loss_fn: Callable,
    make_optax: Callable,
    inputs: Sequence[Any],
    targets: Sequence[Any],
    config: "QatConfig",
    **step_kwargs: Any,
) -> QatTrainStep:
    """Build the QAT step (`train_step(..., quantize="int8")` calls this). `make_optax(param
    names, {id(torch parameter): name})` maps the user's optimizer onto the step's parameters."""
    import torch

    from tpuedge.cloud.qat_batchnorm import conv_batchnorm_pairs, fold_batchnorm
    from tpuedge.shared_ir.capture import export

    name = type(model).__name__.lower()
    user_params = dict(model.named_parameters())
    names_by_param = {id(p): MODEL_PREFIX + n for n, p in user_params.items()}
    eval_capture = export(model, tuple(inputs), training=False, name=name)
    pairs = conv_batchnorm_pairs(eval_capture)
    if pairs:  # train the convolutions as the int8 graph holds them: BatchNorm folded in (a new capture)
        model, aliases = fold_batchnorm(model, pairs)
        names_by_param.update(
            {id(user_params[old]): MODEL_PREFIX + new for new, old in aliases.items() if old in user_params}
        )
        eval_capture = export(model, tuple(inputs), training=False, name=name)
    train_program = _rewritten(export(model, tuple(inputs), training=True, name=name + "_train"), config.target)
    eval_program = _rewritten(eval_capture, config.target)
    _check_supported(eval_program)
    plan, eval_points = quant_points(train_program), quant_points(eval_program)
    if set(eval_points.points) - set(plan.points):
        raise UserError(
            "The model's training-mode and eval-mode graphs differ at the quantized nodes "
            f"({', '.join(sorted(set(eval_points.points) - set(plan.points)))}), so training can't fake the int8 the "
            "edge graph will run; quantize='int8' needs a model whose train and eval graphs match (no BatchNorm)."
        )
    with torch.no_grad():
        output = model(*inputs)
    if not isinstance(output, torch.Tensor):
        raise UserError("quantize='int8' training takes a model with one tensor output (the loss reads it).")
    loss_program = export(_LossOf.module(loss_fn), (output, *targets), name="loss")
    loss = to_jax(loss_program)
    learned = config.ranges == "learned"
    qat = QatLossProgram(to_jax(train_program), loss, plan, config.ema_decay, learned)
    evaluator = QatLossProgram(to_jax(eval_program), loss, eval_points, config.ema_decay, learned)
    tx, trainable = make_optax([n for n in qat.params if not n.startswith(RANGE_PREFIX)], names_by_param)
    if learned:
        import optax

        qat.start_ranges(*[host_to_jax(x, s.name) for x, s in zip(inputs, qat.model.inputs)])
        ranges = [n for n in qat.params if n.startswith(RANGE_PREFIX)]
        tx = optax.multi_transform(
            {"model": tx, "ranges": optax.adam(config.range_lr)},
            lambda tree: {n: "ranges" if n.startswith(RANGE_PREFIX) else "model" for n in tree},
        )
        trainable = trainable + ranges
    return QatTrainStep(
        qat,
        tx,
        trainable,
        model=model,
        example_inputs=inputs,
        evaluator=evaluator,
        target=config.target,
        folded_batchnorm=pairs,
        **step_kwargs,
    )


def _rewritten(program, target: str | None):
    """`program` after `target`'s own IR rewrites (node names kept), as that target will build it."""
    from tpuedge.shared_ir.program import Program
    from tpuedge.shared_ir.targets import get_target

    rewrite = get_target(target).capability().rewrite if target else None
    return Program(rewrite(program.exported_program), name=program.name) if rewrite else program


@dataclass(frozen=True)
class QatConfig:
    """`train_step(..., quantize=QatConfig(ema_decay=0.9))`: int8 QAT with its range options.

    ema_decay: how much of the old range each step keeps (0: the last batch's range).
    ranges: "ema" (each point's range follows its batch min/max by the moving average) or
        "learned" (ranges start at the example batch's min/max and are trained with the loss's
        gradient through the int8 step size, as in LSQ, by Adam at `range_lr`).
    target: the edge target whose own IR rewrites (mcu: LSTM/GRU unrolled into cells,
        hardsigmoid as relu6, ...) are applied before training, so int8 is faked on the graph
        that target converts and every tensor of its int8 model gets a trained range. Its
        program() then is that rewritten graph; android int8 builds take it too.
    """

    ema_decay: float = 0.99
    target: str | None = "mcu"  # whose IR rewrites the trained graph gets (None: none)
    ranges: str = "ema"  # "ema" (statistics) or "learned" (parameters with LSQ-style gradients)
    range_lr: float = 1e-3  # Adam's learning rate for learned ranges

    def __post_init__(self) -> None:
        if not 0.0 <= self.ema_decay < 1.0:
            raise UserError(f"ema_decay must be in [0, 1), got {self.ema_decay}.")
        if self.ranges not in ("ema", "learned"):
            raise UserError(f'QatConfig(ranges={self.ranges!r}): choose "ema" or "learned".')
        if self.range_lr <= 0:
            raise UserError(f"range_lr must be positive, got {self.range_lr}.")


def qat_config(quantize: Any, precision: str) -> QatConfig:
    """`quantize=` as a QatConfig: "int8", an int8 per-channel QuantConfig, or a QatConfig."""
    from tpuedge.quantize.config import QuantConfig

    if precision != "f32":
        raise UserError(
            "quantize='int8' training runs in f32 (fake int8 over bf16 would not be the edge int8); drop precision=."
        )
    if isinstance(quantize, QatConfig):
        return quantize
    config = QuantConfig(scheme="int8") if quantize == "int8" else quantize
    if not isinstance(config, QuantConfig) or config.scheme != "int8" or not config.per_channel:
        raise UserError(
            f"train_step(quantize={quantize!r}) takes \"int8\", a QuantConfig(scheme='int8') with per-channel weights, "
            "or a QatConfig: quantization-aware training fakes the static int8 the mcu and android int8 builds run."
        )
    return QatConfig()
