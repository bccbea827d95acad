"""Where the exported forward parts from Program.run, for the export's self-check to say.

When `verify_export` finds the XLA output off, an op's lowering is not always to blame. A
random-init EfficientNet-B0 (the zoo's) fails that check with no op wrong: each op within 3.8e-5 of torch, the squeeze-excitation gates drifting to 2e-3 and the
logits ending over the tolerance. Running both sides node by node on the failing input tells
the two apart: a jump at one op (every op before it close) points at that op's lowering, a
difference already near the tolerance before it at float rounding the model amplifies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["where_it_parts", "describe_parting", "value_scale", "rounding_sensitivity", "ROUNDING_MARGIN"]

# every op before the first one over the tolerance within this share of it: a jump, not a drift
_JUMP_SHARE = 0.1
# XLA and torch round differently at every op, each difference as large as a 1-ulp change of an
# input and amplified by the ops after it as much: the self-check allows this multiple of what
# such a change does to torch's own outputs. Random-init EfficientNet-B0: a 1-ulp change of its
# input moves its logits 1.4-2.0e-4 of their scale, over the fixed tolerance, and XLA ended 1.4e-4 off.
ROUNDING_MARGIN = 10
_PERTURBATIONS = 3  # 1-ulp changes of the inputs tried; the largest output change counts


def value_scale(values: np.ndarray) -> float:
    """What the self-check measures an error against: max(1, max |value|) over the finite values."""
    values = np.asarray(values)
    finite = np.abs(values[np.isfinite(values)])
    return max(1.0, float(np.max(finite, initial=0.0)))


def rounding_sensitivity(program: Any, inputs: list[np.ndarray], expected: list[np.ndarray]) -> list[float]:
    """Per output: the most its value moves, relative to its scale (`value_scale`), when every
    float input is changed by one ulp (a random sign per element, seeded) and the program runs
    in torch again: what float32 rounding alone does to this model on these inputs. 0 for a
    model without float inputs (token ids cannot move by an ulp)."""
    rng = np.random.default_rng(0)
    worst = [0.0] * len(expected)
    if not any(np.issubdtype(np.asarray(a).dtype, np.floating) for a in inputs):
        return worst
    for _ in range(_PERTURBATIONS):
        moved = []
        for a in inputs:
            a = np.asarray(a)
            if np.issubdtype(a.dtype, np.floating):
                a = a + np.spacing(np.abs(a)) * rng.choice(np.array([-1, 1], a.dtype), a.shape)
            moved.append(a)
        for i, (e, g) in enumerate(zip(expected, program.run(*moved))):
            if np.issubdtype(np.asarray(e).dtype, np.floating):
                worst[i] = max(
                    worst[i], float(np.max(np.abs(np.asarray(g, np.float64) - e), initial=0.0)) / value_scale(e)
                )
    return worst


def where_it_parts(program: Any, jax_program: Any, inputs: list[np.ndarray], tolerance: float) -> str:
    """One sentence naming the first IR node whose JAX value is off by more than `tolerance` of
    its scale (max(1, max |value|)) on `inputs`, and whether the difference jumped there or grew;
    "" when every node is within it (the output's difference then comes from no single node)."""
    import jax

    from tpuedge.quantize.metrics import max_abs_error
    from tpuedge.shared_ir.ir_values import IntermediateRecorder

    recorder = IntermediateRecorder(program)
    reference = recorder(*inputs)
    with jax.default_device(jax.devices("cpu")[0]):
        got = jax_program.intermediates(jax_program.params, jax_program.buffers, *inputs)
    rows = []  # (layer, relative error) in graph order
    for name, layer in recorder.layers.items():
        if layer.is_input or name not in reference or name not in got:
            continue
        expected, value = reference[name], np.asarray(got[name])
        if value.shape != expected.shape or not np.issubdtype(expected.dtype, np.floating):
            continue
        error = max_abs_error(expected, value) / value_scale(expected)
        rows.append((layer, error if np.isfinite(error) else np.inf))  # NaN (JAX's inf - inf, 0 / 0) is off too
    return describe_parting(rows, tolerance)


def describe_parting(rows: list[tuple[Any, float]], tolerance: float) -> str:
    """The sentence of `where_it_parts` from (layer, relative error) rows in graph order."""
    before = 0.0
    for index, (layer, error) in enumerate(rows):
        if error > tolerance:
            where = f"{layer.label()}" + (f" at {layer.source}" if layer.source else "")
            off = f"{error:.2g}" if np.isfinite(error) else "NaN or inf where torch's value is finite"
            head = f"the first op off by more than {tolerance:g} of its scale is {where} ({off})"
            if index == 0 or before <= _JUMP_SHARE * tolerance:
                return (
                    f"{head}, every op before it within {before:.2g}: a jump at that op, so its ATen->JAX "
                    "lowering is the suspect"
                )
            return (
                f"{head}, after ops already off by up to {before:.2g}: the difference grew over the ops before "
                "it, float rounding the model amplifies (a deep random-init net does) rather than one wrong "
                "lowering"
            )
        before = max(before, error)
    return ""
