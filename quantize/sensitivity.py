"""Per-node int8 sensitivity on the IR: which quantization points cost the model's accuracy.

One instrumented lowering of the Program to JAX (an `IREvaluator`: cloud's interpreter, found
through the target registry by `shared_ir.targets.ir_evaluator`) fakes int8 at every
quantization point (`activation_ranges.quant_points`) behind a gate per point, with the
ranges the edge calibration would give (global min/max over the samples). Compiled once,
it is run with one point's gate open at a time: the drop in mean per-sample cosine of the
outputs against float is that point's sensitivity. Every point is scored (not a whitelist
of op kinds): on a pretrained BERT-style encoder the damage is in the residual additions and
the FFN output projections, whose outlier channels stretch the int8 range (`bench` numbers
in docs/quantization.md), ops no kind-based grouping picks.

Each point carries its module scope in the form the LiteRT float model's tensor names take
("Class_attr/...", edge/flatbuffer/tensor_names.py), so an edge build can find the flatbuffer ops a point became.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "IREvaluator",
    "PointSensitivity",
    "rank_quant_points",
    "TooManyPoints",
    "RANKING_SAMPLES",
    "MAX_RANKED_POINTS",
]

# Samples each point's cost is measured on: one run per point, each as dear as the samples are
# many, and the runs were most of an int8 build (MobileViT-xxs: 194 points, 118 s on 8 samples,
# 42 s on 2). Measured against 8 samples, 2 keep 23 or 24 of the top 24 points and the same top
# 8 on MiniLM, ShuffleNetV2 and MobileViT (bench/ranking_samples.py); the ranking only orders
# the points, and the recipes it leads to are measured on all the search's samples.
RANKING_SAMPLES = 2
# Programs with more quantization points are not ranked: the instrumented JAX program, compiled
# once, grows with them, and so do the runs. Resemblyzer's 3-layer LSTM unrolled over 160 frames
# has 5,276 points; ranking them took 195 s (7 GB) of compilation alone even with one run per
# module. The zoo's other models have at most 194 (MobileViT-xxs).
MAX_RANKED_POINTS = 2048
_OBSERVE_CHUNK = 8  # calibration samples per batch of the range-observing run


class IREvaluator(Protocol):
    """The IR lowered to JAX with a hook on every value: what the ranking runs. The backend that
    lowers the IR to JAX provides it (cloud); quantize imports no backend."""

    def lower(self, program: Any) -> Any:
        """`program` as a callable with `params`, `buffers` and `call_transformed(params, buffers,
        *inputs, rng_key=, transform=)` -> (buffers, outputs); its hook sees ("node" | "input", name, value)."""

    def stage(self, value: Any, name: str) -> Any:
        """A host array as the lowered program takes it."""

    def fake_quant(self, x: Any, low: Any, high: Any) -> Any:
        """`x` rounded to asymmetric per-tensor int8 over [low, high] and back."""


class TooManyPoints(Exception):
    """The program has more than MAX_RANKED_POINTS quantization points: not ranked (the message
    says how many)."""


@dataclass(frozen=True)
class PointSensitivity:
    node: str  # IR node name (a quantization point)
    op: str  # its ATen op
    loss: float  # 1 - mean per-sample cosine of the outputs with only this point in int8
    low: float  # the calibrated range used
    high: float
    scope: str  # module scope, litert-torch's tensor-name form ("" for the top module)
    source: str  # model source line (the file's name only: manifests must not depend on the working folder)

    def to_json(self) -> dict:
        return {
            "node": self.node,
            "op": self.op,
            "loss": round(self.loss, 6),
            "range": [round(self.low, 4), round(self.high, 4)],
            "scope": self.scope,
            "source": self.source,
        }


def _stack(evaluator: IREvaluator, samples: list, index: int):
    """Input `index` of every sample, stacked on a new batch axis, as the evaluator takes it."""
    return evaluator.stage(np.stack([np.asarray(s[index]) for s in samples]), f"input {index}")


def _mean_cosine(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Mean over outputs of the mean per-sample cosine (the accuracy budget's measure)."""
    from tpuedge.quantize.metrics import mean_sample_cosine

    return float(np.mean([mean_sample_cosine(a, b) for a, b in zip(ref, got)]))


def _cap_rsqrt_ranges(ranges: dict, plan, nodes: dict) -> None:
    """Each rsqrt point's high end capped at what its quantized input can give
    (quantize/singular_ranges.py), in place: the edge calibration caps the same tensor."""
    from tpuedge.quantize.singular_ranges import RSQRT_OPS, rsqrt_output_max
    from tpuedge.shared_ir.op_registry import op_key

    for point, (lo, hi) in list(ranges.items()):
        node = nodes.get(point)
        if node is None or node.op != "call_function" or op_key(node.target) not in RSQRT_OPS or not node.args:
            continue
        source = plan.inherits.get(node.args[0].name, node.args[0].name)
        if source in ranges:
            ranges[point] = (lo, min(hi, rsqrt_output_max(*ranges[source])))


def rank_quant_points(
    program: Any, calibration: list, measure: list | None = None, *, evaluator: IREvaluator
) -> list[PointSensitivity]:
    """Every float quantization point of `program`, most sensitive first; TooManyPoints over
    MAX_RANKED_POINTS.

    calibration: samples (lists of arrays with a batch dim of 1) that set the ranges;
    measure: samples the cosine is measured on (default: the calibration samples);
    evaluator: the IR in JAX (`shared_ir.targets.ir_evaluator()`).
    """
    import jax
    import jax.numpy as jnp

    from tpuedge.quantize.activation_ranges import quant_points
    from tpuedge.shared_ir.sources import module_scope, node_source

    measure = measure or calibration
    plan = quant_points(program)
    if len(plan.points) > MAX_RANKED_POINTS:
        raise TooManyPoints(
            f"{len(plan.points):,} IR points, more than the {MAX_RANKED_POINTS:,} the ranking measures "
            "one by one (a recurrent layer unrolled over time)"
        )
    jp = evaluator.lower(program)
    points = list(plan.points)
    index = {p: i for i, p in enumerate(points)}
    key = jax.random.key(0)
    n_inputs = len(program.inputs)

    def observe(params, buffers, *inputs):
        seen: dict[str, Any] = {}

        def hook(kind, name, value):
            if kind in ("node", "input") and name in index and jnp.issubdtype(value.dtype, jnp.floating):
                seen[name] = jnp.stack([jnp.min(value), jnp.max(value)])
            return value

        jp.call_transformed(params, buffers, *inputs, rng_key=key, transform=hook)
        return seen

    # global min/max over the calibration samples, _OBSERVE_CHUNK at a time (a batch of all of
    # them would hold every activation of, say, 64 images at once)
    observe_batch = jax.jit(jax.vmap(observe, in_axes=(None, None) + (0,) * n_inputs))
    observed: dict[str, Any] = {}
    for start in range(0, len(calibration), _OBSERVE_CHUNK):
        chunk = calibration[start : start + _OBSERVE_CHUNK]
        for p, v in observe_batch(
            jp.params, jp.buffers, *[_stack(evaluator, chunk, i) for i in range(n_inputs)]
        ).items():
            lo, hi = jnp.min(v[:, 0]), jnp.max(v[:, 1])
            observed[p] = (
                (lo, hi) if p not in observed else (jnp.minimum(observed[p][0], lo), jnp.maximum(observed[p][1], hi))
            )
    ranges = {p: (float(lo), float(hi)) for p, (lo, hi) in observed.items()}
    ranges.update(plan.fixed)
    nodes = {n.name: n for n in program.exported_program.graph.nodes}
    _cap_rsqrt_ranges(ranges, plan, nodes)
    lows = jnp.asarray([ranges.get(p, (0.0, 0.0))[0] for p in points], jnp.float32)
    highs = jnp.asarray([ranges.get(p, (0.0, 0.0))[1] for p in points], jnp.float32)

    def gated(params, buffers, gate, *inputs):
        def hook(kind, name, value):
            if kind in ("node", "input") and name in index and jnp.issubdtype(value.dtype, jnp.floating):
                i = index[name]
                return value + gate[i] * (evaluator.fake_quant(value, lows[i], highs[i]) - value)
            return value

        return jp.call_transformed(params, buffers, *inputs, rng_key=key, transform=hook)[1]

    run = jax.jit(jax.vmap(gated, in_axes=(None, None, None) + (0,) * n_inputs))
    inputs = [_stack(evaluator, measure, i) for i in range(n_inputs)]
    closed = jnp.zeros(len(points), jnp.float32)
    reference = [np.asarray(o) for o in run(jp.params, jp.buffers, closed, *inputs)]
    ranked = []
    for i, point in enumerate(points):
        if point not in observed and point not in plan.fixed:
            continue  # not a float value on this path (an integer input)
        got = [np.asarray(o) for o in run(jp.params, jp.buffers, closed.at[i].set(1.0), *inputs)]
        node = nodes.get(point)
        ranked.append(
            PointSensitivity(
                node=point,
                op=str(getattr(node, "target", "input"))
                if node is not None and node.op == "call_function"
                else "input",
                loss=max(0.0, 1.0 - _mean_cosine(reference, got)),
                low=ranges[point][0],
                high=ranges[point][1],
                scope=module_scope(node) if node is not None else "",
                source=(node_source(node, bare=True) or "") if node is not None else "",
            )
        )
    ranked.sort(key=lambda s: -s.loss)
    return ranked
