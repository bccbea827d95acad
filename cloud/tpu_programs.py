"""What tpuedge compiles for a TPU slice with no TPU (cloud/tpu_compile.py runs the compile): the
forward with the batch split over the slice, and a training step (train-mode capture, a loss, AdamW)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from tpuedge.cloud.tpu_compile import CompileTarget, compile_on_topology
from tpuedge.shared_ir.errors import UserError

__all__ = [
    "compile_forward",
    "compile_train_step",
    "compile_step_for_topology",
    "TRAIN_LOSSES",
    "TRAIN_SHARDINGS",
]


def _next_multiple(value: int, of: int) -> int:
    return (value + of - 1) // of * of


def _mesh_for_batch(target: "CompileTarget", batch: int | None, axis: str):
    """A 1-D mesh named `axis` over as many of the slice's devices as the batch divides over."""
    import math

    import numpy as np
    from jax.sharding import Mesh

    ways = math.gcd(batch, target.device_count) if isinstance(batch, int) else 1
    info = {"batch": batch, "mesh": {axis: ways}, "note": ""}
    if ways < target.device_count:
        info["note"] = (
            f"batch {batch} splits over {ways} of the {target.device_count} devices, so the program is "
            f"compiled for {ways}; pass --batch {_next_multiple(batch or 1, target.device_count)} "
            "(a multiple of the device count) to use the whole slice"
        )
    return Mesh(np.array(target.devices[:ways]), (axis,)), info


def compile_forward(target: "CompileTarget", export, batch: int | None) -> dict[str, Any]:
    """The forward with weights replicated and the batch split over the "data" axis."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh, info = _mesh_for_batch(target, batch, "data")
    rep, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
    params, buffers, *inputs = export.abstract_arguments()

    def place(aval, sharding):
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding)

    arguments = (
        jax.tree.map(lambda a: place(a, rep), params),
        jax.tree.map(lambda a: place(a, rep), buffers),
        *(place(a, split if a.shape else rep) for a in inputs),
    )
    report = compile_on_topology(target, lambda: jax.jit(export.function).lower(*arguments), export.jax_program)
    return {**info, **report}


TRAIN_LOSSES = ("auto", "cross_entropy", "mse")
TRAIN_SHARDINGS = ("data", "fsdp")


def _loss_and_targets(program, loss: str) -> tuple[str, Callable, list]:
    """(loss name, torch loss_fn(outputs, *targets), example targets) for the program's outputs.

    "auto": cross-entropy with integer labels when the model has one float [batch, classes]
    output, else mean squared error against targets shaped like the outputs."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    outputs = program.outputs
    batch = outputs[0].shape[0] if outputs and outputs[0].shape else 1
    classifier = len(outputs) == 1 and len(outputs[0].shape) == 2 and "float" in outputs[0].dtype
    if loss == "auto":
        loss = "cross_entropy" if classifier else "mse"
    rng = np.random.default_rng(0)
    if loss == "cross_entropy":
        if not classifier:
            shapes = ", ".join(s.describe() for s in outputs)
            raise UserError(
                f"--loss cross_entropy needs one [batch, classes] logits output, the model gives {shapes}; use --loss mse."
            )
        labels = torch.from_numpy(rng.integers(0, outputs[0].shape[1], size=(batch,)))
        return loss, F.cross_entropy, [labels]

    def mse(out, *targets):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return sum(F.mse_loss(o, t) for o, t in zip(outs, targets))

    targets = [torch.from_numpy(rng.standard_normal(s.shape).astype(np.float32)) for s in outputs]
    return loss, mse, targets


def compile_train_step(
    target: "CompileTarget", program, batch: int | None, loss: str = "auto", sharding: str = "data"
) -> dict[str, Any]:
    """A training step of the Program, compiled over the topology with tpuedge.cloud's own train
    step (`TrainStep.lower(mesh)`): forward + torch loss captured together, gradients, AdamW
    (optax.adamw(1e-3)); batch split over the mesh, parameters and optimizer state replicated
    ("data") or sharded ("fsdp"); XLA inserts the collectives.

    The forward runs in training mode (`train_capture.training_mode_module`: BatchNorm batch
    statistics and running-stat updates, active dropout), whatever mode the Program was
    captured in. To compile your own loss and optimizer:
    `tpu_programs.compile_step_for_topology(tpuedge.cloud.train_step(model, ...), "v5e:2x2")`."""
    import optax
    import torch

    from tpuedge.cloud.train import TrainStep, loss_program
    from tpuedge.cloud.train_capture import training_mode_module

    if sharding not in TRAIN_SHARDINGS:
        raise UserError(f"Unknown train-step sharding {sharding!r}; choose one of: {', '.join(TRAIN_SHARDINGS)}.")
    loss_name, loss_fn, targets = _loss_and_targets(program, loss)
    module, switched = training_mode_module(program)
    inputs = [torch.from_numpy(a) for a in program.example_inputs(seed=0)[0]]
    with _quiet_torch_export():
        captured = loss_program(module, loss_fn, (tuple(inputs), tuple(targets)))
    step = TrainStep.from_program(captured, optax.adamw(1e-3), n_inputs=len(inputs))
    mesh, info = _mesh_for_batch(target, batch, sharding)
    report = compile_on_topology(target, lambda: step.lower(mesh), step.jax_program)
    mode = {"mode": "train", "ops_switched_to_train_mode": dict(sorted(switched.items()))}
    return {**info, "loss": loss_name, "optimizer": "optax.adamw(1e-3)", "sharding": sharding, **mode, **report}


def compile_step_for_topology(step, topology: str = "v5e:2x2", sharding: str = "data") -> dict[str, Any]:
    """Compile a `tpuedge.cloud.train_step(...)` for a TPU slice without a TPU: the same report
    as `tpuedge build --train-step` writes (train-mode capture, your loss and optimizer)."""
    from tpuedge.cloud.topologies import parse_topology

    target = CompileTarget(parse_topology(topology))
    batch = step.jax_program.inputs[0].shape[0] if step.jax_program.inputs else None
    mesh, info = _mesh_for_batch(target, batch, sharding)
    return {
        **target.describe(),
        "programs": {"train_step": {**info, **compile_on_topology(target, lambda: step.lower(mesh), step.jax_program)}},
    }


@contextlib.contextmanager
def _quiet_torch_export() -> Iterator[None]:
    """torch.export of a GraphModule warns about its own internals; those aren't the user's."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield
