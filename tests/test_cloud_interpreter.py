"""The cloud interpreter: Program -> pure JAX function, on the reference models."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge
from tpuedge.cloud.interpreter import to_jax
from tpuedge.shared_ir.errors import ProblemsError, UserError

torch.set_num_threads(1)


class GRUTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8, padding_idx=0)
        self.gru = nn.GRU(8, 12, batch_first=True, bidirectional=True)
        self.head = nn.Linear(24, 5)

    def forward(self, tokens):
        out, _ = self.gru(self.emb(tokens))
        return self.head(out)


class Upsampler(nn.Module):
    """Transposed conv, group norm, bilinear upsampling, avg pool, SiLU: the less common layers."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 8, 3, stride=2, padding=1, output_padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.conv = nn.Conv2d(8, 4, 3, padding=1, groups=4)

    def forward(self, x):
        x = F.silu(self.gn(self.up(x)))
        x = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)
        return F.avg_pool2d(self.conv(x), 2, ceil_mode=True)


def _models():
    from models import build_cnn, build_depthwise, build_lstm, build_mlp, build_transformer

    torch.manual_seed(0)
    batch = {
        "mlp": (build_mlp, lambda: (torch.randn(4, 32),)),
        "cnn": (build_cnn, lambda: (torch.randn(4, 3, 32, 32),)),
        "depthwise": (build_depthwise, lambda: (torch.randn(4, 3, 32, 32),)),
        "transformer": (build_transformer, lambda: (torch.randn(2, 16, 64),)),
        "lstm": (build_lstm, lambda: (torch.randn(3, 12, 16),)),
        "gru": (lambda: (GRUTagger().eval(), None), lambda: (torch.randint(0, 20, (3, 7)),)),
        "upsampler": (lambda: (Upsampler().eval(), None), lambda: (torch.randn(2, 3, 8, 8),)),
    }
    return batch


MODELS = _models()


@pytest.fixture(scope="module")
def lowered():
    """name -> (torch module, inputs, Program, JaxProgram); built once."""
    out = {}
    for name, (build, make_inputs) in MODELS.items():
        torch.manual_seed(1)
        module, _ = build()
        inputs = make_inputs()
        program = tpuedge.export(module, inputs, name=name)
        out[name] = (module, inputs, program, to_jax(program))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_matches_torch_eager(lowered, name):
    module, inputs, program, jp = lowered[name]
    with torch.no_grad():
        want = module(*inputs).numpy()
    got = np.asarray(jp.forward(*inputs)[0])
    assert got.shape == want.shape
    # the input-dependent part too (outputs centred over the batch), so a lowering that ignored
    # its input could not pass on a model whose outputs barely move
    centred_got, centred_want = got - got.mean(0), want - want.mean(0)
    scale = np.abs(centred_want).max()
    assert scale > 1e-3
    assert np.abs(got - want).max() < 2e-5, np.abs(got - want).max()
    assert np.abs(centred_got - centred_want).max() / scale < 1e-4
    assert program.check("cloud-tpu") == []  # the capability agrees with the interpreter


def test_pure_function_is_jittable_and_returns_all_buffers(lowered):
    import jax

    module, inputs, _, jp = lowered["cnn"]
    new_buffers, outputs = jax.jit(jp)(jp.params, jp.buffers, *[np.asarray(i) for i in inputs])
    assert set(new_buffers) == set(jp.buffers)  # eval program: nothing mutated, all returned
    assert jp.mutated_buffers == []
    np.testing.assert_allclose(np.asarray(outputs[0]), np.asarray(jp.forward(*inputs)[0]), atol=1e-6)
    # params are arguments, not constants: zero weights change the output
    zeroed = {k: v * 0 for k, v in jp.params.items()}
    _, zero_out = jax.jit(jp)(zeroed, jp.buffers, *[np.asarray(i) for i in inputs])
    assert np.abs(np.asarray(zero_out[0])).max() == 0.0


def test_batchnorm_train_mode_running_stats_are_returned():
    from models import SmallCNN

    torch.manual_seed(0)
    model = SmallCNN()
    x = torch.randn(8, 3, 16, 16)
    program = tpuedge.export(model, (x,), training=True)
    jp = to_jax(program)
    assert sorted(jp.mutated_buffers) == sorted(
        f"bn{i}.{s}" for i in (1, 2) for s in ("running_mean", "running_var", "num_batches_tracked")
    )
    new_buffers, outputs = jp(jp.params, jp.buffers, x.numpy())
    model.train()
    with torch.no_grad():
        want = model(x)  # updates torch's running stats in place
    np.testing.assert_allclose(np.asarray(outputs[0]), want.numpy(), atol=1e-4)
    for name in ("bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"):
        np.testing.assert_allclose(np.asarray(new_buffers[name]), model.get_buffer(name).numpy(), atol=1e-5, rtol=1e-5)
    assert int(new_buffers["bn1.num_batches_tracked"]) == 1
    assert float(np.abs(np.asarray(jp.buffers["bn1.running_var"]) - 1).max()) == 0.0  # inputs untouched


def test_dropout_needs_and_follows_the_key():
    import jax

    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5))
    x = torch.randn(32, 16)
    jp = to_jax(tpuedge.export(model, (x,), training=True))
    with pytest.raises(UserError, match="rng_key"):
        jp(jp.params, jp.buffers, x.numpy())
    a = np.asarray(jp(jp.params, jp.buffers, x.numpy(), rng_key=jax.random.PRNGKey(1))[1][0])
    b = np.asarray(jp(jp.params, jp.buffers, x.numpy(), rng_key=jax.random.PRNGKey(1))[1][0])
    c = np.asarray(jp(jp.params, jp.buffers, x.numpy(), rng_key=jax.random.PRNGKey(2))[1][0])
    with torch.no_grad():
        full = model[0](x).numpy()
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.3
    zero = a == 0
    assert 0.45 < zero.mean() < 0.55
    np.testing.assert_allclose(a[~zero], 2 * full[~zero], rtol=1e-5, atol=1e-6)  # kept values scaled 1/(1-p)


def test_int64_labels_run_as_int32_and_out_of_range_is_a_user_error():
    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 5)

        def forward(self, x, y):
            return F.cross_entropy(self.fc(x), y) + (y.sum() * 0).float()

    model, x, y = Loss(), torch.randn(6, 8), torch.randint(0, 5, (6,))
    jp = to_jax(tpuedge.export(model, (x, y)))
    got = float(jp.forward(x, y)[0])
    with torch.no_grad():
        assert abs(got - float(model(x, y))) < 1e-6
    with pytest.raises(UserError, match="int32"):
        jp.forward(x, torch.full((6,), 2**40, dtype=torch.int64))


def test_intermediates_use_the_captured_node_names(lowered):
    module, inputs, program, jp = lowered["cnn"]
    captured = [n.name for n in program.exported_program.graph.nodes if n.op == "call_function"]
    inter = jp.intermediates(jp.params, jp.buffers, *inputs)
    for name in ("conv2d", "batch_norm", "relu", "max_pool2d", "conv2d_1", "linear"):
        assert name in captured and name in inter, name
    with torch.no_grad():
        conv1 = module.conv1(inputs[0]).numpy()
        bn1 = module.bn1(module.conv1(inputs[0])).numpy()
    np.testing.assert_allclose(np.asarray(inter["conv2d"]), conv1, atol=1e-5)
    np.testing.assert_allclose(np.asarray(inter["batch_norm"]), bn1, atol=1e-5)
    # helper nodes of a decomposition are keyed under the op they came from
    assert any(k.startswith("batch_norm/") for k in inter)


def test_intermediates_of_a_transformer_cover_attention(lowered):
    _, inputs, program, jp = lowered["transformer"]
    inter = jp.intermediates(jp.params, jp.buffers, *inputs)
    for name in ("layer_norm", "scaled_dot_product_attention", "gelu", "getitem", "add_1"):
        assert name in inter, name
    assert inter["scaled_dot_product_attention"].shape == (2, 4, 16, 16)
    np.testing.assert_allclose(np.asarray(inter["add_1"]), np.asarray(jp.forward(*inputs)[0]), atol=1e-6)


def test_unsupported_op_is_reported_with_its_source_line():
    class Pairwise(nn.Module):  # nn.Bilinear's op has no lowering
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 16, 16))

        def forward(self, x):
            return nn.functional.bilinear(x, x.flip(-1), self.weight)

    program = tpuedge.export(Pairwise(), (torch.randn(4, 16),))
    with pytest.raises(ProblemsError) as info:
        to_jax(program)
    subjects = [p.subject for p in info.value.problems]
    assert any("trilinear" in s for s in subjects), subjects
    assert any("test_cloud_interpreter.py" in src for p in info.value.problems for src in p.sources)
    checked = [p.subject for p in program.check("cloud-tpu") if p.kind == "op"]
    assert set(checked) >= {s for s in subjects if "trilinear" in s}


def _all_core_aten_ops() -> set[str]:
    """Every core-ATen overload torch has a schema for (torch.ops.aten loads packets lazily)."""
    names = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    core = set()
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        for overload in packet.overloads() if packet is not None else ():
            if torch.Tag.core in getattr(packet, overload).tags:
                core.add(f"aten.{name}.{overload}")
    return core


def test_coverage_comes_from_the_registry():
    from tpuedge.cloud.lowerings import LOWERINGS, NOT_LOWERED
    from tpuedge.shared_ir.coverage import coverage

    core = _all_core_aten_ops()
    unsupported = {op for op in core if not LOWERINGS.supports(op)}
    assert unsupported <= set(NOT_LOWERED), sorted(unsupported - set(NOT_LOWERED))  # every gap has a reason
    assert len(core) - len(unsupported) >= 170
    rows = coverage("cloud-tpu")  # what `tpuedge ops --target cloud-tpu` prints
    assert all(r.supported == LOWERINGS.supports(r.op) for r in rows)
    assert all(r.note for r in rows if r.core and not r.supported)
    assert len(LOWERINGS) >= 190
