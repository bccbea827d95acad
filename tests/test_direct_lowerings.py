"""Direct StableHLO lowerings (edge/litert/direct_lowerings.py) in place of litert-torch's jax bridge: the
float flatbuffer is byte for byte the one the bridge gives, for every form they take (broadcasts
of each rank, scalars, bounds as ints and floats, permutes, views, clones), and litert-torch's own
lowerings are back in its registry afterwards. Old code: no direct lowerings (every one of these
ops went through a jax.jit lowering, ~8 ms per distinct shape)."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge
from tpuedge.edge.litert import direct_arithmetic, direct_emit, direct_lowerings, direct_shapes
from tpuedge.edge.litert.litert_lowering import lower_to_float_flatbuffer


class _Forms(nn.Module):
    """Every op and argument form the direct lowerings take, and some they hand back."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)  # bias add: a rank-1 operand broadcast
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8 * 6 * 6, 5)
        self.scale = nn.Parameter(torch.rand(8, 1, 1) + 0.5)  # same rank after a leading one

    def forward(self, x, y):
        h = F.relu(self.conv(x))
        h = h + F.relu6(self.depthwise(h))  # residual add, hardtanh as a float-bounded clamp
        h = h * F.hardsigmoid(h) - torch.clamp(h, min=0) * 0.5  # int lower bound; scalar mul
        h = F.hardswish(h) / self.scale + 2.0  # divide by a broadcast parameter, scalar add
        h = torch.clamp(h, max=4).permute(0, 2, 3, 1).contiguous().clone()  # permute, clone
        h = h.permute(0, 3, 1, 2).reshape(h.shape[0], -1)  # a view
        out = torch.sigmoid(self.fc(h)) * y * 3  # mm and a bias add, sigmoid, an int32 scalar
        q = out.unsqueeze(1).expand(-1, 4, -1).unsqueeze(1)  # unsqueeze, expand
        att = F.scaled_dot_product_attention(q, q, q)  # mul.Scalar, bmm, softmax
        tiled = y.unsqueeze(1).expand(-1, 3, -1).sum(1)  # an expand that grows the tensor
        row = out[:1].unsqueeze(0)
        single = torch.bmm(row, row.transpose(1, 2)).flatten()  # a batch of one: jax's own form
        return att.squeeze(1).sum(1) + tiled + single, (y.view(-1) + 1).clamp(-1.0, 1.0)


@contextlib.contextmanager
def _calls_recorded():
    """Every `direct_emit.call` the direct lowerings make, recorded (a mock wrapping it)."""
    spy = mock.Mock(wraps=direct_emit.call)
    with mock.patch.object(direct_arithmetic, "call", spy), mock.patch.object(direct_shapes, "call", spy):
        yield spy


def _flatbuffer(program, direct: bool) -> bytes:
    switch = direct_lowerings.direct_lowerings if direct else contextlib.nullcontext
    with mock.patch.object(direct_lowerings, "direct_lowerings", switch):
        return lower_to_float_flatbuffer(program)


@pytest.fixture(scope="module")
def forms_program():
    torch.manual_seed(0)
    example = (torch.randn(2, 3, 6, 6), torch.randn(2, 5))
    return tpuedge.export(_Forms().eval(), example, name="forms")


def test_direct_lowerings_write_the_bridges_flatbuffer(forms_program):
    with _calls_recorded() as call:
        direct = _flatbuffer(forms_program, direct=True)
    taken = {c.args[1][0] for c in call.call_args_list}
    bridged = _flatbuffer(forms_program, direct=False)
    every = {
        "add",
        "subtract",
        "multiply",
        "divide",
        "permute",
        "identity",
        "reshape",
        "relu",
        "clamp",
        "sigmoid",
        "dot",
        "unsqueeze",
        "expand",
    }
    assert every <= taken, f"not taken: {sorted(every - taken)} (the test would not compare them)"
    assert direct == bridged


class _Reductions(nn.Module):
    """Means, softmaxes and max pools in each form taken (keepdim or not, negative and unsorted
    dims, all dims; padding, ceil mode, dilation)."""

    def forward(self, x):
        pools = (
            F.max_pool2d(x, 2).sum()
            + F.max_pool2d(x, 3, 2, 1).mean()
            + F.max_pool2d(x, 3, 2, ceil_mode=True).mean()
            + F.max_pool2d(x, 2, 1, dilation=2).sum()
        )
        means = x.mean((2, 3), keepdim=True).flatten() + x.mean([3, -2]).flatten() + x.mean()
        return pools + means, x.mean(-1), torch.softmax(x, 1), torch.softmax(x, -1)


def test_means_softmaxes_and_max_pools_write_the_bridges_flatbuffer():
    """A model whose only bridged ops were these (kws_dscnn: a mean; MTCNN: max pools and a softmax)
    now lowers without jax at all: the first jax lowering in a process cost ~15 MB and ~20 ms."""
    torch.manual_seed(0)
    program = tpuedge.export(_Reductions().eval(), (torch.randn(2, 3, 7, 7),), name="reductions")
    with _calls_recorded() as call:
        direct = _flatbuffer(program, direct=True)
    taken = [c.args[1] for c in call.call_args_list]
    assert {key[0] for key in taken} >= {"mean", "softmax", "max_pool2d"}
    assert len({key for key in taken if key[0] == "max_pool2d"}) == 4 and len({k for k in taken if k[0] == "mean"}) == 4
    assert direct == _flatbuffer(program, direct=False)


class _Sequences(nn.Module):
    """What an unrolled LSTM and a padded 1-D conv stack lower to: slices (step 1 and larger,
    negative bounds), selects, splits, tanh, sqrt, constant pads with a value, and hardtanh (ReLU6:
    MobileNetV2's 35 bridged ops). (A split into
    one part fails in litert-torch's own lowering: not compared.)"""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, batch_first=True)

    def forward(self, x, s):
        y, _ = self.lstm(s)
        a, b, c = torch.split(s, [1, 2, 3], dim=-1)
        w = torch.tanh(a) + torch.sqrt(b.abs()).sum(-1, keepdim=True) + c[:, 1:, ::2].mean()
        clipped = F.relu6(x) + F.hardtanh(x) + F.hardtanh(x, -2.5, 0.5)  # hardtanh: clamp's form
        return (
            y[:, -1],
            w,
            F.pad(x, (1, 2, 0, 3), value=0.5),
            F.pad(x, (3, 3)).sum(),
            s[:, 2:-1],
            s[0],
            x[:, :, ::3],
            clipped,
        )


def test_slices_splits_pads_and_unary_ops_write_the_bridges_flatbuffer():
    torch.manual_seed(0)
    program = tpuedge.export(_Sequences().eval(), (torch.randn(2, 3, 7, 7), torch.randn(2, 5, 6)), name="sequences")
    with _calls_recorded() as call:
        direct = _flatbuffer(program, direct=True)
    taken = {c.args[1][0] for c in call.call_args_list}
    assert taken >= {"slice", "select", "split", "tanh", "sqrt", "pad", "identity"}, taken
    assert direct == _flatbuffer(program, direct=False)


def test_a_split_into_one_part_lowers_and_runs():
    """litert-torch 0.10's own lowering fails on a split into one part (its bridge hands a
    one-result list to a step that expects a tensor); ours gives the input itself, and LiteRT
    computes what torch does."""
    import numpy as np

    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    class OnePart(nn.Module):
        def forward(self, s):
            (whole,) = torch.split(s, [6], dim=-1)
            return whole * 2.0

    program = tpuedge.export(OnePart(), (torch.randn(2, 5, 6),), name="one_part")
    x = np.random.default_rng(0).standard_normal((2, 5, 6)).astype(np.float32)
    assert np.allclose(LiteRTRunner(_flatbuffer(program, direct=True)).run([x])[0], x * 2.0)


def test_litert_torchs_lowerings_are_back_after_a_lowering(forms_program):
    from tpuedge.edge.litert.litert_session import litert_session

    with litert_session():
        from litert_torch.backend.lowerings import registry

    ops = registry.global_registry.registered_ops
    aten = torch.ops.aten
    before = {op: ops[op] for op in (aten.add.Tensor, aten.permute.default, aten.clamp.default)}
    lower_to_float_flatbuffer(forms_program)
    assert {op: ops[op] for op in before} == before


def test_forms_they_do_not_take_go_to_litert_torch():
    class IntMath(nn.Module):  # integer tensors: the bridge's own integer promotion rules
        def forward(self, x):
            return (x * 3 + x).clamp(0, 50) - 1

    program = tpuedge.export(IntMath(), (torch.arange(12, dtype=torch.int32).reshape(3, 4),), name="ints")
    made_before = direct_emit._next_id
    direct = _flatbuffer(program, direct=True)
    assert direct_emit._next_id == made_before  # none taken: all integer
    assert direct == _flatbuffer(program, direct=False)


def test_a_node_without_tensor_meta_goes_to_litert_torch():
    """litert-torch's own lowerings cope with a node that carries no tensor meta; ours step aside."""
    from tpuedge.edge.litert.litert_session import litert_session

    class Context:
        node = torch.fx.Graph().placeholder("x")  # no "val", no "tensor_meta"

    with litert_session():
        assert direct_emit.result_type(Context()) is None
