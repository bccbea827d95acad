"""Cloud backend: the shared IR lowered op by op to JAX; training on XLA (TPU/CPU/GPU), StableHLO export.

    step = tpuedge.cloud.train_step(model, loss_fn, optimizer, example_batch, mesh=None)
    loss = step(*batch)
    step.sync_to(model)
    step = tpuedge.cloud.train_step(..., quantize="int8")   # quantization-aware: step.program() has trained ranges
    step = tpuedge.cloud.train_step(..., lora=tpuedge.cloud.LoraConfig(rank=8, targets=("q_proj", "v_proj")))
    step.merged_program()                        # adapters folded into the weights: build it for a phone
    step.save("ckpt")                            # async sharded Orbax checkpoint; SIGTERM saves and exits
    step = tpuedge.cloud.train_step(..., resume="ckpt")   # from its newest checkpoint (step.data_position)
    python -m tpuedge.cloud.launch --processes 2 --devices-per-process 4 train.py   # a job of 2 processes

    jp = tpuedge.cloud.to_jax(program)          # pure (params, buffers, *inputs, rng_key) -> (new_buffers, outputs)

Light at import (the CLI imports `tpuedge.cloud.target`): jax loads on first use of these names.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train_step", "TrainStep", "QatConfig", "LoraConfig", "LoraTrainStep", "to_jax", "JaxProgram"]

_LAZY = {
    "train_step": "tpuedge.cloud.train_api",
    "TrainStep": "tpuedge.cloud.train",
    "QatConfig": "tpuedge.cloud.qat",
    "LoraConfig": "tpuedge.cloud.lora",
    "LoraTrainStep": "tpuedge.cloud.lora_step",
    "to_jax": "tpuedge.cloud.interpreter",
    "JaxProgram": "tpuedge.cloud.interpreter",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
