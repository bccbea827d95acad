"""F.one_hot as a comparison with 0..n-1 (shared_ir/passes/one_hot_compare.py), and the cloud
backend's no-op for the range checks decompositions leave."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.one_hot_compare import OneHotAsCompare
from tpuedge.shared_ir.program import Program


class BagOfClasses(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(10, 3)

    def forward(self, ids):
        return self.head(F.one_hot(ids, 10).float().mean(1)), F.one_hot(ids[:, :2], num_classes=12)


def _ids(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 10, (2, 5)).astype(np.int64)


def _program():
    torch.manual_seed(0)
    return tpuedge.export(BagOfClasses().eval(), (torch.from_numpy(_ids(0)),), name="bag")


def test_one_hot_becomes_a_comparison_exactly():
    program = _program()
    ep, result = OneHotAsCompare()(program.exported_program)
    assert result.changed == 2
    assert "aten.one_hot.default" not in {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    for seed in range(3):
        for ours, reference in zip(Program(ep, name="bag").run(_ids(seed)), program.run(_ids(seed))):
            assert ours.dtype == reference.dtype
            np.testing.assert_array_equal(ours, reference)


def test_android_and_cloud_build_a_one_hot_model():
    """Old code: both checks refused aten._assert_async.msg, the bounds check of one_hot's decomposition."""
    program = _program()
    assert program.check("android") == [] and program.check("cloud-tpu") == []
    for artifact in (
        tpuedge.build(program, "android", None, quantize="none"),
        tpuedge.build(program, "cloud-tpu", None),
    ):
        for seed in range(2):
            ours, reference = artifact.run(_ids(seed)), program.run(_ids(seed))
            np.testing.assert_allclose(ours[0], reference[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(ours[1], reference[1])
