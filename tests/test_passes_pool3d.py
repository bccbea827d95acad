"""3-D pools (video) as 2-D pools over frames and over time (shared_ir/passes/pool3d_as_2d.py):
torch's numbers for every window form, and an android int8 build of a video stem. Old code: the
pools lowered to STABLEHLO_REDUCE_WINDOW and ai-edge-quantizer stopped on them ("MAXIMUM not found
in tensor_name_to_qsv", torchvision's S3D)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpuedge
from tpuedge.shared_ir.passes.pool3d_as_2d import Pool3dAs2d
from tpuedge.shared_ir.program import Program

POOLS = {
    "max-frame-only": lambda x: F.max_pool3d(x, (1, 3, 3), (1, 2, 2), (0, 1, 1)),
    "max-cube-ceil": lambda x: F.max_pool3d(x, 3, 2, 1, ceil_mode=True),
    "max-time-stride": lambda x: F.max_pool3d(x, (2, 1, 1), (2, 1, 1)),
    "avg-counted-pad": lambda x: F.avg_pool3d(x, (2, 3, 3), (1, 2, 2), (1, 1, 1)),
    "avg-valid-only-ceil": lambda x: F.avg_pool3d(
        x, (3, 2, 2), (2, 2, 2), (1, 1, 0), ceil_mode=True, count_include_pad=False
    ),
}


class _Pool(torch.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def forward(self, x):
        return self.pool(x)


@pytest.mark.parametrize("form", sorted(POOLS))
def test_a_3d_pool_becomes_2d_pools_with_torchs_numbers(form):
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 9, 7)).astype(np.float32)
    program = tpuedge.export(_Pool(POOLS[form]), (torch.from_numpy(x),), name="pool")
    ep, result = Pool3dAs2d()(program.exported_program)
    rewritten = Program(ep, name="pooled")
    assert result.changed == 1 and not [op for op in rewritten.op_histogram if "pool3d" in op], rewritten.op_histogram
    np.testing.assert_allclose(rewritten.run(x)[0], program.run(x)[0], rtol=1e-6, atol=1e-6)


def test_a_dilated_3d_max_pool_is_left_alone():
    program = tpuedge.export(
        _Pool(lambda x: F.max_pool3d(x, 2, dilation=2)), (torch.zeros(1, 2, 5, 5, 5),), name="dilated"
    )
    assert Pool3dAs2d()(program.exported_program)[1].changed == 0


class _VideoStem(torch.nn.Module):
    """An S3D-like stem: a 3-D convolution, a frame-only max pool, one over time, a global average."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 8, (1, 3, 3), padding=(0, 1, 1))
        self.frames = torch.nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1))
        self.time = torch.nn.MaxPool3d((2, 1, 1), (2, 1, 1))
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.time(self.frames(torch.relu(self.conv(x))))
        return self.head(F.avg_pool3d(y, (2, 8, 8)).flatten(1))


def test_a_video_stem_builds_for_android_int8_within_budget(tmp_path):
    torch.manual_seed(0)
    program = tpuedge.export(_VideoStem().eval(), (torch.zeros(1, 3, 4, 16, 16),), name="video")
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal((1, 3, 4, 16, 16)).astype(np.float32)] for _ in range(24)]
    artifact = tpuedge.build(program, "android", tmp_path / "int8", quantize="int8", calibration=calibration)
    ops = artifact.manifest["op_histogram"]
    assert "STABLEHLO_REDUCE_WINDOW" not in ops and ops.get("MAX_POOL_2D", 0) >= 2, ops
    assert artifact.manifest["accuracy_budget"]["met"]
