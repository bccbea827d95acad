"""Training on XLA from a torch model: `train_step(model, loss_fn, optimizer, example_batch)`.

    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.AdamW(model.parameters()), (x, y))
    for x, y in batches:
        loss = step(x, y)        # one jitted step: forward, loss, grads, optimizer update (state donated)
    step.sync_to(model)          # trained parameters and buffers back into the torch module

How it works: the model and the loss are wrapped in one module, `forward(*batch) =
loss_fn(model(*inputs), *targets)`, captured with `tpuedge.export(..., training=True)` (train-mode
BatchNorm and dropout), lowered by `to_jax`, differentiated with `jax.value_and_grad` and
updated with the optimizer mapped to optax (`optimizers.to_optax`), all in one `jax.jit`.

Inputs vs targets: `example_batch = (inputs..., targets...)` with `n_inputs` inputs (default 1:
`model(x)`, `loss_fn(out, y)`); or `example_batch = ((x1, x2), (y,))`, two tuples. Calls to the
step take the batch the same way. Batches must keep the example's shapes (one compile).

Integer labels: int64 targets run as int32 (JAX's x64 is off by default); every batch is checked
on the host to fit int32 (a UserError otherwise), so there is no silent wrap-around.

Randomness: the state holds a PRNG key; step `i` uses `fold_in(key, i)` for dropout. The draws
follow torch's distributions, not torch's generator.

For compiling without devices (e.g. for a TPU topology): `TrainStep.lower(mesh)` returns the
`jax.stages.Lowered` of the sharded step over abstract (ShapeDtypeStruct) arguments; the
pure pieces are `train_step_fn(jax_program, tx, trainable)`, `init_train_state(...)`,
`mesh.state_shardings(...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.cloud import distributed
from tpuedge.cloud.checkpoint import different_model_error
from tpuedge.cloud.interpreter import JaxProgram, host_to_jax, to_jax
from tpuedge.cloud.mesh import batch_sharding, parse_mesh, replicated, state_shardings
from tpuedge.cloud.optimizers import to_optax
from tpuedge.cloud.train_capture import ModelWithLoss, loss_program, split_batch
from tpuedge.cloud.train_checkpoint import Checkpointing
from tpuedge.shared_ir.errors import UserError

__all__ = [
    "TrainStep",
    "ModelWithLoss",
    "loss_program",
    "train_step_fn",
    "eval_step_fn",
    "init_train_state",
    "split_batch",
]

MODEL_PREFIX = "model."


# ---- pure functions ----------------------------------------------------------------------------
def init_train_state(jax_program: JaxProgram, tx, trainable: Sequence[str], seed: int = 0) -> dict[str, Any]:
    """{"params", "buffers", "opt_state", "step", "rng"}: what one step consumes and returns."""
    params = dict(jax_program.params)
    return {
        "params": params,
        "buffers": dict(jax_program.buffers),
        "opt_state": tx.init({n: params[n] for n in trainable}),
        "step": jnp.zeros((), jnp.int32),
        "rng": jax.random.PRNGKey(seed),
    }


def train_step_fn(jax_program: JaxProgram, tx, trainable: Sequence[str]) -> Callable:
    """Pure `(state, *batch) -> (new_state, loss)`; only `trainable` parameters get gradients."""
    import optax

    trainable = list(trainable)

    def step(state, *batch):
        params = state["params"]
        frozen = {n: v for n, v in params.items() if n not in trainable}
        key = jax.random.fold_in(state["rng"], state["step"])

        def loss_of(train_params):
            new_buffers, outputs = jax_program({**frozen, **train_params}, state["buffers"], *batch, rng_key=key)
            return outputs[0], new_buffers

        train_params = {n: params[n] for n in trainable}
        (loss, new_buffers), grads = jax.value_and_grad(loss_of, has_aux=True)(train_params)
        updates, opt_state = tx.update(grads, state["opt_state"], train_params)
        new_params = {**frozen, **optax.apply_updates(train_params, updates)}
        new_state = {
            "params": new_params,
            "buffers": new_buffers,
            "opt_state": opt_state,
            "step": state["step"] + 1,
            "rng": state["rng"],
        }
        return new_state, loss

    return step


def eval_step_fn(eval_program: JaxProgram) -> Callable:
    """Pure `(params, buffers, *batch) -> (loss, outputs)` of the eval-mode program."""

    def evaluate(params, buffers, *batch):
        _, outputs = eval_program(params, buffers, *batch, rng_key=jax.random.PRNGKey(0))
        return outputs[0], outputs[1:]

    return evaluate


# ---- the stateful front door -------------------------------------------------------------------
class TrainStep(Checkpointing):
    """One jitted training step with its state (see the module docstring; checkpoints and
    preemption: tpuedge.cloud.train_checkpoint; several processes: tpuedge.cloud.distributed)."""

    def __init__(
        self,
        jax_program: JaxProgram,
        tx,
        trainable: Sequence[str],
        *,
        n_inputs: int,
        mesh: Any = None,
        seed: int = 0,
        eval_program_factory: Callable[[], Any] | None = None,
        scheduled: bool = False,
        max_steps: int | None = None,
    ):
        self.jax_program = jax_program
        self.tx = tx
        self.trainable = list(trainable)
        self.n_inputs = n_inputs
        self.mesh = parse_mesh(mesh)
        distributed.check_mesh_spans_job(self.mesh)
        self._eval_program_factory = eval_program_factory
        self._scheduled = scheduled
        self._max_steps = max_steps  # a bounded scheduler's (OneCycleLR) step count
        self._host_steps = 0
        self._eval_jitted = None
        self._fn = train_step_fn(jax_program, tx, self.trainable)
        state = init_train_state(jax_program, tx, self.trainable, seed)
        self._state_shardings = state_shardings(self.mesh, state, state["params"]) if self.mesh else None
        self.state = distributed.put_state(state, self._state_shardings)
        self._jitted = jax.jit(
            self._fn,
            donate_argnums=0,
            out_shardings=(self._state_shardings, replicated(self.mesh)) if self.mesh else None,
        )

    @classmethod
    def from_program(cls, program, optimizer, *, n_inputs: int = 1, mesh: Any = None, seed: int = 0) -> "TrainStep":
        """From a Program whose first output is the scalar loss (e.g. `loss_program(...)`), with an
        optax transform (or a torch optimizer over the same parameters)."""
        jp = to_jax(program)
        tx, trainable = to_optax(optimizer, {}, list(jp.params))
        return cls(jp, tx, trainable, n_inputs=n_inputs, mesh=mesh, seed=seed)

    # ---- stepping ---------------------------------------------------------------------------
    def _device_batch(self, batch: Sequence[Any]) -> list[jax.Array]:
        flat, _ = split_batch(batch, self.n_inputs)
        specs = self.jax_program.inputs
        if len(flat) != len(specs):
            expected = ", ".join(s.describe() for s in specs)
            raise UserError(f"The step takes {len(specs)} tensors ({expected}); got {len(flat)}.")
        arrays = []
        for value, spec in zip(flat, specs):
            if distributed.process_count() > 1:  # this process's share of the global batch
                share = value if isinstance(value, jax.Array) else host_to_jax(value, spec.name)
                sharding = batch_sharding(self.mesh, tuple(spec.shape), spec.name)
                arrays.append(distributed.global_batch_array(share, tuple(spec.shape), sharding, spec.name))
                continue
            if isinstance(value, jax.Array):
                arr = value
            else:
                arr = host_to_jax(value, spec.name)
            if tuple(arr.shape) != tuple(spec.shape):
                raise UserError(
                    f"Batch tensor {spec.name!r} has shape {list(arr.shape)} but the step was built for "
                    f"{list(spec.shape)}; keep batch shapes fixed (drop the last partial batch) or build "
                    "another step for the new shape."
                )
            if self.mesh is not None:
                arr = jax.device_put(arr, batch_sharding(self.mesh, tuple(arr.shape), spec.name))
            arrays.append(arr)
        return arrays

    def __call__(self, *batch: Any) -> jax.Array:
        """One training step on `batch`; returns the loss (a 0-d jax array; float() it to read)."""
        if self._max_steps is not None and self._host_steps >= self._max_steps:
            raise UserError(
                f"The scheduler covers {self._max_steps} steps (OneCycleLR's total_steps) and they are done; build "
                "it with a larger total_steps (or epochs * steps_per_epoch) for a longer run."
            )
        self._stop_if_preempted()
        arrays = self._device_batch(batch)
        self.state, loss = self._jitted(self.state, *arrays)
        self._host_steps += 1
        return loss

    @property
    def step_count(self) -> int:
        return int(self.state["step"])

    @property
    def learning_rates(self) -> list[float]:
        """The learning rate the next step uses, per torch param group (torch's `group["lr"]`)."""
        found = []
        for path, leaf in jax.tree_util.tree_flatten_with_path(self.state["opt_state"])[0]:
            if path and getattr(path[-1], "name", None) == "lr":
                group = next((str(k.key) for k in path if isinstance(getattr(k, "key", None), str)), "group0")
                found.append((int(group.removeprefix("group") or 0), float(leaf)))
        return [lr for _, lr in sorted(found)]

    def set_learning_rate(self, lr: float) -> None:
        """Change the learning rate of every torch-mapped param group (no recompile)."""
        if self._scheduled:
            raise UserError(
                "This step's learning rate follows the scheduler given to train_step; build the step without "
                "scheduler= to set the learning rate by hand."
            )
        lr_value = jnp.asarray(lr, jnp.float32)

        def replace(path, leaf):
            return lr_value if path and getattr(path[-1], "name", None) == "lr" else leaf

        self.state = dict(self.state, opt_state=jax.tree_util.tree_map_with_path(replace, self.state["opt_state"]))

    # ---- evaluation -------------------------------------------------------------------------
    @property
    def eval_step(self) -> Callable:
        """Pure jitted `(params, buffers, *batch) -> (loss, outputs)` in eval mode (BatchNorm
        running stats, no dropout)."""
        if self._eval_jitted is None:
            if self._eval_program_factory is None:
                raise UserError("This TrainStep was built from a Program; it has no eval program.")
            self._eval_jitted = jax.jit(eval_step_fn(to_jax(self._eval_program_factory())))
        return self._eval_jitted

    def evaluate(self, *batch: Any) -> tuple[jax.Array, list[jax.Array]]:
        """Eval-mode (loss, model outputs) with the current parameters and buffers."""
        arrays = self._device_batch(batch)
        return self.eval_step(self.state["params"], self.state["buffers"], *arrays)

    # ---- torch interop, checkpoints ---------------------------------------------------------
    def sync_to(self, model) -> None:
        """Write the trained parameters and buffers into `model` (the module given to train_step)."""
        import torch

        host = distributed.host_copy({"params": self.state["params"], "buffers": self.state["buffers"]})
        with torch.no_grad():
            for kind, values in (("parameter", host["params"]), ("buffer", host["buffers"])):
                for name, value in values.items():
                    if not name.startswith(MODEL_PREFIX):
                        continue  # the loss function's own state
                    local = name[len(MODEL_PREFIX) :]
                    tensor = model.get_parameter(local) if kind == "parameter" else model.get_buffer(local)
                    writable = np.array(value)  # torch wants a writable array
                    tensor.copy_(torch.from_numpy(writable).to(tensor.dtype).reshape(tensor.shape))

    def state_dict(self) -> dict[str, Any]:
        """Host (numpy) copy of the whole state: params, buffers, optimizer leaves, step, rng (in
        memory; `save(folder)` writes a checkpoint to disk)."""
        host = distributed.host_copy(self.state)
        leaves, _ = jax.tree_util.tree_flatten(host["opt_state"])
        return {
            "params": {k: np.asarray(v) for k, v in host["params"].items()},
            "buffers": {k: np.asarray(v) for k, v in host["buffers"].items()},
            "opt_state": [np.asarray(v) for v in leaves],
            "step": int(host["step"]),
            "rng": np.asarray(host["rng"]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` (shapes must match this step's)."""
        current = self.state
        treedef = jax.tree_util.tree_structure(current["opt_state"])
        if set(state["params"]) != set(current["params"]) or len(state["opt_state"]) != treedef.num_leaves:
            raise different_model_error("given to load_state_dict", "parameter names or optimizer state do not match")
        restored = {
            "params": {k: jnp.asarray(v, current["params"][k].dtype) for k, v in state["params"].items()},
            "buffers": {k: jnp.asarray(state["buffers"][k], v.dtype) for k, v in current["buffers"].items()},
            "opt_state": jax.tree_util.tree_unflatten(treedef, [jnp.asarray(v) for v in state["opt_state"]]),
            "step": jnp.asarray(state["step"], jnp.int32),
            "rng": jnp.asarray(state["rng"], jnp.uint32),
        }
        self.state = distributed.put_state(restored, self._state_shardings)
        self._host_steps = int(state["step"])

    # ---- compiling elsewhere ------------------------------------------------------------------
    def abstract_args(self, mesh: Any = None, batch_size: int | None = None) -> tuple[Any, list[Any]]:
        """(abstract state, abstract batch) as ShapeDtypeStructs carrying `mesh` shardings;
        `mesh` may hold devices that are not attached (jax.experimental.topologies)."""
        mesh = parse_mesh(mesh) if mesh is not None else self.mesh
        shapes = jax.eval_shape(lambda s: s, self.state)
        shard = state_shardings(mesh, shapes, shapes["params"]) if mesh is not None else None

        def abstract(leaf, sharding=None):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

        state = jax.tree.map(abstract, shapes, shard) if mesh is not None else jax.tree.map(abstract, shapes)
        batch = []
        for spec in self.jax_program.inputs:
            shape = tuple(spec.shape)
            if batch_size is not None and shape:
                shape = (batch_size,) + shape[1:]
            dtype = jax.dtypes.canonicalize_dtype(np.dtype(spec.dtype))
            sharding = batch_sharding(mesh, shape, spec.name) if mesh is not None else None
            batch.append(jax.ShapeDtypeStruct(shape, dtype, sharding=sharding))
        return state, batch

    def lower(self, mesh: Any = None, batch_size: int | None = None):
        """`jax.stages.Lowered` of this step, sharded over `mesh` (default: the step's own), from
        abstract arguments only: `.as_text()` is its StableHLO, `.compile()` compiles for the
        mesh's devices (TPU topologies included). `batch_size` re-sizes dim 0 of the inputs
        (the traced graph keeps the example's shapes, so only do that for batch-agnostic models)."""
        mesh = parse_mesh(mesh) if mesh is not None else self.mesh
        state, batch = self.abstract_args(mesh, batch_size)
        if batch_size is not None and batch_size != (self.jax_program.inputs[0].shape or [None])[0]:
            raise UserError(
                "lower(batch_size=...) must equal the example batch size: the captured graph has static shapes; "
                "capture the step with an example batch of that size instead."
            )
        out_shardings = None
        if mesh is not None:
            out_shardings = (jax.tree.map(lambda s: s.sharding, state), replicated(mesh))
        return jax.jit(self._fn, donate_argnums=0, out_shardings=out_shardings).lower(state, *batch)
