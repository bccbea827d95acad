"""The IR in JAX with a hook on every value, for the int8 sensitivity ranking (quantize/sensitivity.py).

quantize sits below the backends, and edge may not import cloud: the ranking reaches this
evaluator through the target registry (`CloudTpuTarget.ir_evaluator`, `shared_ir.targets.ir_evaluator`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["JaxIREvaluator"]


class JaxIREvaluator:
    """quantize.sensitivity.IREvaluator over cloud's interpreter and fake int8."""

    def lower(self, program: Any) -> Any:
        from tpuedge.cloud.interpreter import to_jax

        return to_jax(program)

    def stage(self, value: Any, name: str) -> Any:
        from tpuedge.cloud.interpreter import host_to_jax

        return host_to_jax(value, name)

    def fake_quant(self, x: Any, low: Any, high: Any) -> Any:
        from tpuedge.cloud.fake_quant import fake_quant_activation

        return fake_quant_activation(x, low, high)
