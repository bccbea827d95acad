"""The LoRA train step: `train_step(model, loss_fn, opt, batch, lora=LoraConfig(...))`.

    step = tpuedge.cloud.train_step(model, loss_fn, torch.optim.AdamW(model.parameters(), lr=1e-3), batch,
                                    lora=tpuedge.cloud.LoraConfig(rank=8, targets=("q_proj", "v_proj")))
    loss = step(*batch)                  # adapters updated; the base weights untouched
    program = step.merged_program()      # the model's Program, adapters folded in: build it for a phone

The step's state (`step.state`, donated to each step) holds the adapters as its parameters, so
the optimizer state exists for them alone; the base weights are a separate argument the step
reads and never donates (`step.base`). A torch optimizer gives each adapter pair the
hyperparameters of the param group that holds its weight; an optax transform trains them all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.cloud import distributed
from tpuedge.cloud.interpreter import JaxProgram, to_jax
from tpuedge.cloud.lora import LoraConfig, LoraHook, adapter_names, by_weight, init_adapters, merge, target_weights
from tpuedge.cloud.mesh import param_sharding, parse_mesh, replicated, tree_shardings
from tpuedge.cloud.optimizers import is_optax_transform, to_optax
from tpuedge.cloud.train import MODEL_PREFIX, TrainStep
from tpuedge.cloud.train_capture import loss_program
from tpuedge.shared_ir.errors import UserError

__all__ = ["LoraProgram", "LoraTrainStep", "lora_step_fn", "lora_train_step"]


@dataclass(eq=False)  # hashed by identity, so jax.jit closes over it
class LoraProgram:
    """A loss program whose targeted weights carry adapters. `params` are the adapters (the
    TrainStep's trainable state); the base weights come in as their own argument."""

    program: JaxProgram
    weights: dict[str, str]  # parameter name in the program -> model weight name (the adapters' key)
    scale: float
    params: dict[str, jax.Array]
    buffers: dict[str, jax.Array] = field(init=False)

    def __post_init__(self):
        self.buffers = dict(self.program.buffers)
        self.inputs = list(self.program.inputs)
        self.outputs = list(self.program.outputs)

    def __call__(self, adapters, base, buffers, *batch, rng_key=None):
        hook = LoraHook(adapters, self.weights, self.scale)
        return self.program.call_transformed(base, buffers, *batch, rng_key=rng_key, transform=hook)


def lora_step_fn(lora: LoraProgram, tx) -> Callable:
    """Pure `(state, base, *batch) -> (new_state, loss)`: gradients and updates for the adapters
    (`state["params"]`) only; `base` is read, never returned."""
    import optax

    def step(state, base, *batch):
        key = jax.random.fold_in(state["rng"], state["step"])

        def loss_of(adapters):
            new_buffers, outputs = lora(adapters, base, state["buffers"], *batch, rng_key=key)
            return outputs[0], new_buffers

        (loss, new_buffers), grads = jax.value_and_grad(loss_of, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new_state = dict(
            state,
            params=optax.apply_updates(state["params"], updates),
            buffers=new_buffers,
            opt_state=opt_state,
            step=state["step"] + 1,
        )
        return new_state, loss

    return step


class LoraTrainStep(TrainStep):
    """A `TrainStep` over adapters (see the module docstring): `merged_program()`,
    `merged_module()`, `adapters()`, `save_adapters` / `load_adapters`; `sync_to(model)` writes
    the merged weights into the model."""

    def __init__(self, lora: LoraProgram, tx, *, config: LoraConfig, model, example_inputs: Sequence[Any], **kwargs):
        super().__init__(lora, tx, list(lora.params), **kwargs)
        self.config = config
        self._lora = lora
        self._model = model
        self._example_inputs = tuple(example_inputs)
        base = dict(lora.program.params)
        self.base = distributed.put_state(base, tree_shardings(self.mesh, base) if self.mesh else None)
        self._fn = lora_step_fn(lora, tx)
        self._jitted = jax.jit(
            self._fn,
            donate_argnums=0,  # the state only: the base weights outlive every step
            out_shardings=(self._state_shardings, replicated(self.mesh)) if self.mesh else None,
        )

    def __call__(self, *batch: Any) -> jax.Array:
        if self._max_steps is not None and self._host_steps >= self._max_steps:
            return super().__call__(*batch)  # its UserError about the finished schedule
        self._stop_if_preempted()
        arrays = self._device_batch(batch)
        self.state, loss = self._jitted(self.state, self.base, *arrays)
        self._host_steps += 1
        return loss

    # ---- evaluation: the eval program with the same adapters ------------------------------------
    @property
    def eval_step(self) -> Callable:
        """Pure jitted `(params, buffers, *batch) -> (loss, outputs)` in eval mode; `params` holds
        the base weights and the adapters together."""
        if self._eval_jitted is None:
            lora = LoraProgram(to_jax(self._eval_program_factory()), self._lora.weights, self._lora.scale, {})

            def evaluate(params, buffers, *batch):
                adapters = {n: params[n] for n in self._lora.params}
                _, outputs = lora(adapters, params, buffers, *batch, rng_key=jax.random.PRNGKey(0))
                return outputs[0], outputs[1:]

            self._eval_jitted = jax.jit(evaluate)
        return self._eval_jitted

    def evaluate(self, *batch: Any) -> tuple[jax.Array, list[jax.Array]]:
        """Eval-mode (loss, model outputs) with the adapters applied."""
        arrays = self._device_batch(batch)
        return self.eval_step({**self.base, **self.state["params"]}, self.state["buffers"], *arrays)

    # ---- the adapters ------------------------------------------------------------------------
    def adapters(self) -> dict[str, np.ndarray]:
        """Host copies of the adapters, by peft's names ("<module>.lora_A.weight" [rank, in],
        "<module>.lora_B.weight" [out, rank])."""
        return {name: np.asarray(value) for name, value in jax.device_get(self.state["params"]).items()}

    def save_adapters(self, path: str | Path) -> Path:
        """The adapters as one safetensors file (rank, alpha and targets in its metadata)."""
        from tpuedge.cloud.safetensors_file import write_safetensors
        from tpuedge.shared_ir.atomic import atomic_write_path

        path = Path(path)
        alpha = self.config.rank if self.config.alpha is None else self.config.alpha
        metadata = {"rank": str(self.config.rank), "alpha": repr(alpha), "targets": ",".join(self.config.targets)}
        with atomic_write_path(path) as tmp:
            write_safetensors(tmp, self.adapters(), metadata)
        return path

    def load_adapters(self, path: str | Path) -> None:
        """Adapters from `save_adapters` (the optimizer state stays: `state_dict` resumes training)."""
        from tpuedge.cloud.safetensors_file import read_safetensors

        loaded = read_safetensors(Path(path))
        current = self.state["params"]
        wrong = sorted(set(loaded) ^ set(current)) + [
            n for n in current if n in loaded and loaded[n].shape != current[n].shape
        ]
        if wrong:
            raise UserError(
                f"{path} holds other adapters than this step trains ({', '.join(wrong[:4])}"
                f"{', ...' if len(wrong) > 4 else ''} differ); load it into a step built with the same model and "
                "LoraConfig (rank and targets)."
            )
        params = {n: jnp.asarray(loaded[n], current[n].dtype) for n in current}
        if self.mesh:
            params = jax.device_put(params, self._state_shardings["params"])
        self.state = dict(self.state, params=params)

    # ---- the merged weights --------------------------------------------------------------------
    def _merged_state(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(every model parameter: the base with the adapters folded in, the buffers the step
        updates), host arrays by the model's own names."""
        adapters = self.state["params"]
        params = {}
        for name, value in self.base.items():
            if not name.startswith(MODEL_PREFIX):
                continue  # the loss function's own
            weight = self._lora.weights.get(name)
            if weight is not None:
                a, b = adapter_names(weight)
                value = merge(value, adapters[a], adapters[b], self._lora.scale)
            params[name[len(MODEL_PREFIX) :]] = np.array(jax.device_get(value))
        buffers = {
            n[len(MODEL_PREFIX) :]: np.array(jax.device_get(self.state["buffers"][n]))
            for n in self._lora.program.mutated_buffers
            if n.startswith(MODEL_PREFIX)
        }
        return params, buffers

    def sync_to(self, model) -> None:
        """Write the merged weights (and any buffer the step updates) into `model`."""
        import torch

        params, buffers = self._merged_state()
        with torch.no_grad():
            for names, get in ((params, model.get_parameter), (buffers, model.get_buffer)):
                for name, value in names.items():
                    tensor = get(name)
                    tensor.copy_(torch.from_numpy(value).to(tensor.dtype).reshape(tensor.shape))

    def merged_module(self):
        """A copy of the model with the adapters folded into its weights (e.g. for
        `tpuedge.shared_ir.generative.export_decoder`)."""
        model = copy.deepcopy(self._model)
        self.sync_to(model)
        return model

    def merged_program(self, batch_size: int | None = None):
        """The model's eval-mode Program with the adapters folded into its weights, each in its
        own dtype: build it for any target. `batch_size` captures it for another batch (1 for
        a device), else the example's."""
        import torch

        from tpuedge.shared_ir.capture import export

        inputs = self._example_inputs
        if batch_size is not None:
            inputs = tuple(x[:1].expand(batch_size, *x.shape[1:]) for x in inputs)
        program = export(self._model, inputs, name=type(self._model).__name__.lower())
        ep = program.exported_program
        params, buffers = self._merged_state()
        replaced = {}
        for name, old in list(ep.state_dict.items()):  # new tensors: the model's own are never written
            value = params.get(name, buffers.get(name))
            if value is not None:
                new = torch.from_numpy(value).to(old.dtype).reshape(old.shape)
                replaced[id(old)] = (
                    torch.nn.Parameter(new, requires_grad=False) if isinstance(old, torch.nn.Parameter) else new
                )
                ep.state_dict[name] = replaced[id(old)]
        for name, old in list(ep.state_dict.items()):  # a tied weight's other name
            ep.state_dict[name] = replaced.get(id(old), old)
        return program

    # ---- compiling elsewhere ------------------------------------------------------------------
    def lower(self, mesh: Any = None, batch_size: int | None = None):
        """`TrainStep.lower` for this step: the base weights an argument of their own, not donated."""
        mesh = parse_mesh(mesh) if mesh is not None else self.mesh
        if batch_size is not None and batch_size != (self.jax_program.inputs[0].shape or [None])[0]:
            return super().lower(mesh, batch_size)  # its UserError about static shapes
        state, batch = self.abstract_args(mesh)
        base = {
            n: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=param_sharding(mesh, tuple(v.shape)) if mesh else None)
            for n, v in self.base.items()
        }
        out_shardings = (jax.tree.map(lambda s: s.sharding, state), replicated(mesh)) if mesh is not None else None
        return jax.jit(self._fn, donate_argnums=0, out_shardings=out_shardings).lower(state, base, *batch)


def lora_train_step(
    model,
    loss_fn,
    optimizer,
    flat: Sequence[Any],
    n_inputs: int,
    config: Any,
    *,
    precision: str = "f32",
    schedules: Sequence[Any] = (),
    seed: int = 0,
    **step_kwargs: Any,
) -> LoraTrainStep:
    """Build the LoRA step (`train_step(..., lora=...)` calls this)."""
    if not isinstance(config, LoraConfig):
        raise UserError(
            f"train_step(lora={config!r}): pass a tpuedge.cloud.LoraConfig, e.g. "
            'LoraConfig(rank=8, targets=("q_proj", "v_proj")).'
        )
    shapes = target_weights(model, config)  # before the capture: a wrong target or optimizer fails at once
    tx = _adapter_optax(optimizer, model, list(shapes), schedules)
    program = loss_program(model, loss_fn, flat, n_inputs, precision=precision)
    jp = to_jax(program)
    if len(jp.outputs) != 1:
        raise UserError("loss_fn must return one scalar tensor; reduce it with .mean() or .sum().")
    unused = [w for w in shapes if MODEL_PREFIX + w not in jp.params]
    if unused:
        raise UserError(
            f"LoRA targets name weights the model's forward never reads ({', '.join(unused[:3])}); "
            "adapt weights the forward uses, or drop those targets."
        )
    lora = LoraProgram(
        jp, {MODEL_PREFIX + w: w for w in shapes}, config.scale, init_adapters(shapes, config.rank, seed)
    )
    return LoraTrainStep(
        lora,
        tx,
        config=config,
        model=model,
        example_inputs=flat[:n_inputs],
        n_inputs=n_inputs,
        seed=seed,
        eval_program_factory=lambda: loss_program(model, loss_fn, flat, n_inputs, training=False, precision=precision),
        **step_kwargs,
    )


def _adapter_optax(optimizer, model, weights: list[str], schedules: Sequence[Any]):
    """The optax transform over the adapters: an optax one as given; a torch optimizer's rule
    per param group, each adapter pair in its weight's group."""
    if is_optax_transform(optimizer) and not hasattr(optimizer, "param_groups"):
        return optimizer
    names_by_param = {id(p): name for name, p in model.named_parameters()}
    tx, held = to_optax(optimizer, names_by_param, weights, schedules)
    missing = [w for w in weights if w not in held]
    if missing:
        raise UserError(
            f"The optimizer has no param group holding {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}; "
            "a LoRA adapter takes the learning rate and decay of the group that holds its weight. Build the "
            "optimizer over model.parameters(), or pass an optax transform (it trains every adapter)."
        )
    return by_weight(tx, weights)
