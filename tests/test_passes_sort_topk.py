"""sort, argsort and values-only topk as TOPK_V2 indices and a gather (shared_ir/passes/sort_topk.py)."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes.sort_topk import SortAsTopk
from tpuedge.shared_ir.program import Program


class Sorts(torch.nn.Module):
    def forward(self, x):
        return (
            x.argsort(-1),
            torch.sort(x, 0, descending=True).values,
            x.topk(2).values,  # top-k pooling
            torch.sort(x, stable=True)[1],
            x.topk(3, 0, largest=False),
        )  # both read: left as it is


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 10)).astype(np.float32)


def test_sorts_become_topk_indices_and_a_gather_exactly():
    program = tpuedge.export(Sorts().eval(), (torch.from_numpy(_x(0)),), name="sorts")
    ep, result = SortAsTopk()(program.exported_program)
    assert result.changed == 4
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert not [t for t in targets if "sort" in t], targets
    for seed in range(3):
        for ours, reference in zip(Program(ep, name="sorts").run(_x(seed)), program.run(_x(seed))):
            np.testing.assert_array_equal(ours, reference)


def test_android_runs_sorts_and_values_only_topk():
    """Old code: the check passed and the build stopped: LiteRT could not load STABLEHLO_SORT (sort,
    values-only topk), and argsort failed in litert-torch's converter (an i64 comparator)."""
    program = tpuedge.export(Sorts().eval(), (torch.from_numpy(_x(0)),), name="sorts")
    assert program.check("android") == []
    artifact = tpuedge.build(program, "android", None, quantize="none")
    for seed in range(2):
        for ours, reference in zip(artifact.run(_x(seed)), program.run(_x(seed))):
            np.testing.assert_array_equal(ours, reference)
