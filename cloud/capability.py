"""cloud-tpu capability: exactly the ATen -> JAX table the interpreter uses, applied after the
same decomposition (torch's core-ATen table), so `tpuedge check/ops --target cloud-tpu` are exact.

Light at import: torch and jax are imported inside the functions.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.targets import Capability

__all__ = ["cloud_capability", "decompose_to_core_aten"]


def decompose_to_core_aten(exported_program: Any) -> Any:
    """The one decomposition the cloud backend applies: `run_decompositions()` with torch's
    default (core ATen) table. It also functionalizes: BatchNorm running-stat updates become
    BUFFER_MUTATION outputs. Returns a new ExportedProgram; the input is left as captured.

    Functionalization writes `detach` as `alias`, which carries gradients: a straight-through
    estimator's `z + (q - z).detach()` trained with the gradient of q, and the ops of a
    `torch.no_grad()` block came out as plain ops, a teacher under no_grad trained along
    (tests/test_cloud_detach.py). No-grad blocks are inlined first with their outputs detached,
    and the nodes torch records as made from a detach are detach again (lowered as stop_gradient)."""
    import warnings

    import torch

    from tpuedge.shared_ir.passes.autocast_regions import InlineGradModeRegions
    from tpuedge.shared_ir.program_snapshot import with_fake_values

    with_fake_values(exported_program)  # a program read from its cached snapshot: decomposing re-traces it
    exported_program, _ = InlineGradModeRegions()(exported_program)
    with warnings.catch_warnings():  # torch's pytree warns about its own LeafSpec while it copies the program
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        decomposed = exported_program.run_decompositions()
    detach, alias = torch.ops.aten.detach.default, torch.ops.aten.alias.default
    restored = [
        n
        for n in decomposed.graph.nodes
        if n.op == "call_function" and n.target is alias and str(n.meta.get("original_aten")) == str(detach)
    ]
    for node in restored:
        node.target = detach
    if restored:
        decomposed.graph_module.recompile()
    return decomposed


def cloud_capability() -> Capability:
    from tpuedge.cloud.lowerings import LOWERINGS, NOT_LOWERED

    return Capability(
        target="cloud-tpu",
        ops=LOWERINGS,
        decompose=decompose_to_core_aten,
        notes=dict(NOT_LOWERED),
        suggestions=dict(NOT_LOWERED),
        # complex64 runs on TPU (a spectrogram's FFT in forward); double precision does not
        unsupported_dtypes=frozenset({"torch.float64", "torch.complex128"}),
    )
