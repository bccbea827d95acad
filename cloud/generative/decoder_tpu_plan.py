"""A decoder's TPU memory plan: the decode step compiled for a TPU slice with no TPU here.

The decode step (jax_decoder.py) is compiled by the real XLA:TPU compiler over every device of
the slice, tensor-parallel ("model" axis: weights and KV heads split as in serving_mesh.py), at
a stated batch and the capture's cache length. The report gives, per device, the weights, the
KV cache and the compiler's own total (arguments + outputs - donated aliases + temporaries +
code), and the largest batch whose total fits the device's HBM: what a sequence adds is read
from compiles at the stated batch and twice it; the batch that allows is compiled, rescaled by
the HBM it leaves or misses and compiled again (four compiles at most), and the largest batch
that fit is reported.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

__all__ = ["decoder_tpu_plan", "describe_decoder_tpu_plan", "TPU_PLAN_FILE"]

TPU_PLAN_FILE = "tpu_plan.json"
_BATCH_CAP = 4096  # a plan past this many sequences reads "at least 4096"


def _sharded_bytes(shape: tuple[int, ...], itemsize: int, spec, mesh) -> int:
    """Bytes one device holds of an array of `shape` split by `spec` over `mesh`."""
    size = itemsize * int(np.prod(shape))
    ways = 1
    for axes in spec:
        for axis in axes if isinstance(axes, tuple) else (axes,):
            if axis is not None:
                ways *= int(mesh.shape[axis])
    return size // ways


def _compile_decode(target, decoder, mesh, batch: int) -> dict[str, Any]:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from tpuedge.cloud.generative.jax_decoder import DECODE
    from tpuedge.cloud.generative.serving_mesh import cache_spec, weight_spec
    from tpuedge.cloud.tpu_compile import compile_on_topology

    spec = decoder.spec
    step = decoder.pure_steps()[DECODE]

    def placed(shape, dtype, partition):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, partition))

    params = {n: placed(v.shape, v.dtype, weight_spec(mesh, n, tuple(v.shape))) for n, v in decoder.params.items()}
    buffers = {n: placed(v.shape, v.dtype, PartitionSpec()) for n, v in decoder.buffers[DECODE].items()}
    caches = tuple(
        placed((batch, *s[1:]), np.dtype(spec.cache_dtype), cache_spec(mesh, (batch, *s[1:])))
        for s in spec.cache_shapes
    )
    rows = placed((batch, 1), np.int32, PartitionSpec())
    report = compile_on_topology(
        target,
        lambda: jax.jit(step, donate_argnums=(2,)).lower(params, buffers, caches, rows, rows),
        decoder.programs[DECODE],
    )
    weights = sum(
        _sharded_bytes(tuple(v.shape), v.dtype.itemsize, weight_spec(mesh, n, tuple(v.shape)), mesh)
        for n, v in decoder.params.items()
    )
    cache = sum(
        _sharded_bytes((batch, *s[1:]), np.dtype(spec.cache_dtype).itemsize, cache_spec(mesh, (batch, *s[1:])), mesh)
        for s in spec.cache_shapes
    )
    report.update(batch=batch, weight_bytes_per_device=weights, cache_bytes_per_device=cache)
    return report


def decoder_tpu_plan(decoder, choice, batch: int) -> tuple[dict | None, dict]:
    """(tpu_plan.json content or None, the manifest's summary)."""
    from jax.sharding import Mesh

    from tpuedge.cloud import tpu_compile

    status = {"topology": choice.name, "batch": batch, "context_length": decoder.spec.cache_length}
    reason = tpu_compile.libtpu_unavailable_reason()
    if reason:
        print(
            f"tpuedge: no TPU memory plan for {choice.name} ({reason}); the portable artifacts are still written.",
            file=sys.stderr,
        )
        return None, {**status, "status": f"skipped: {reason}"}
    target = tpu_compile.CompileTarget(choice)
    mesh = Mesh(np.array(target.devices), ("model",))
    at_batch = _compile_decode(target, decoder, mesh, batch)
    device_hbm = choice.chip.hbm_bytes // target.per_chip
    largest = _largest_batch(target, decoder, mesh, at_batch, device_hbm)
    plan = {
        **target.describe(),
        "mesh": {"model": target.device_count},
        "context_length": decoder.spec.cache_length,
        "device_hbm_bytes": device_hbm,
        "decode_step": at_batch,
        "largest_batch": largest,
        "notes": (
            "Per-device figures of the decode step compiled by XLA:TPU without a TPU, tensor-parallel over the "
            "slice's devices (weights and KV heads split). total_bytes = arguments + outputs - donated aliases + "
            "temporaries + code. largest_batch: the largest batch whose compiled total fits the device's HBM "
            "(per_sequence_bytes from compiles at the stated batch and twice it, confirmed by its own compile). Compile times vary between builds."
        ),
    }
    return plan, {**status, "status": "compiled", "report": TPU_PLAN_FILE, "largest_batch": largest.get("batch")}


def _largest_batch(target, decoder, mesh, at_batch: dict, device_hbm: int) -> dict:
    """The bytes a sequence adds, from the compiled batch and twice it (weights, code and the
    temporaries that do not grow with the batch, e.g. a matmul's copy of its weights, are the
    rest); the batch they allow is compiled, then rescaled by the HBM it leaves or misses."""
    batch = at_batch["batch"]
    total = at_batch["hbm_per_device"]["total_bytes"]
    doubled = _compile_decode(target, decoder, mesh, 2 * batch)["hbm_per_device"]["total_bytes"]
    per_sequence = max(1.0, (doubled - total) / batch)
    fixed = total - batch * per_sequence
    estimate = min(_BATCH_CAP, max(1, math.floor((device_hbm - fixed) / per_sequence)))
    best, tried = None, set()
    for _ in range(4):  # each compile rescales the batch by the HBM left or missing; the largest that fits is kept
        tried.add(estimate)
        used = _compile_decode(target, decoder, mesh, estimate)["hbm_per_device"]["total_bytes"]
        if used <= device_hbm and (best is None or estimate > best[0]):
            best = (estimate, used)
        following = min(_BATCH_CAP, max(1, math.floor(estimate * device_hbm / used)))
        if (
            following in tried
            or (best is not None and following <= best[0])
            or used / device_hbm > 0.98
            and used <= device_hbm
        ):
            break
        estimate = following
    if best is None:
        return {"batch": None, "fits": False, "note": "no batch found to fit within four compiles"}
    return {
        "batch": best[0],
        "fits": True,
        "capped": best[0] == _BATCH_CAP,
        "total_bytes": best[1],
        "fraction_of_device_hbm": best[1] / device_hbm,
        "per_sequence_bytes": int(per_sequence),
        "fixed_bytes": int(fixed),
    }


def describe_decoder_tpu_plan(plan: dict | None, status: dict) -> list[str]:
    if plan is None:
        return [f"  TPU memory plan: {status['status']}"]
    step = plan["decode_step"]
    hbm = step["hbm_per_device"]
    largest = plan["largest_batch"]
    mib = 2**20
    lines = [
        f"  TPU memory plan for {plan['topology']} ({plan['chips']} x {plan['device_kind']}, tensor-parallel over "
        f"{plan['devices']} device(s), context {plan['context_length']}):",
        f"    decode at batch {step['batch']}: weights {step['weight_bytes_per_device'] / mib:.2f} MiB + KV cache "
        f"{step['cache_bytes_per_device'] / mib:.2f} MiB per device; compiled total {hbm['total_bytes'] / mib:.2f} MiB "
        f"({100 * hbm['fraction_of_device_hbm']:.2f}% of {plan['device_hbm_bytes'] / 2**30:.1f} GiB)",
    ]
    if largest.get("batch"):
        at_least = "at least " if largest.get("capped") else ""
        lines.append(
            f"    largest batch that fits: {at_least}{largest['batch']} ({100 * largest['fraction_of_device_hbm']:.1f}% of HBM)"
        )
    return lines
