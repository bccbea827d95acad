"""LoRA on the cloud train step: only the adapters train (and own optimizer state), the base
weights stay bit-identical and undonated, the loss falls on a memorisation task in f32 and bf16,
the merged Program computes the adapted model and builds for android."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import tiny_lms
import torch

import tpuedge
import tpuedge.cloud
from tpuedge.cloud.causal_lm import CausalLMLogits, NextTokenLoss
from tpuedge.cloud import LoraConfig
from tpuedge.cloud.safetensors_file import write_safetensors
from tpuedge.shared_ir.errors import UserError

CONFIG = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "self_attn.v_proj"))
STEPS = 30


@pytest.fixture(scope="module")
def model_and_ids():
    ids = torch.randint(3, tiny_lms.VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    return CausalLMLogits(tiny_lms.model("llama")).eval(), ids


@pytest.fixture(scope="module")
def base_logits(model_and_ids):
    model, ids = model_and_ids
    return tpuedge.export(model, (ids,), name="base").run(ids.numpy())[0]


@pytest.fixture(scope="module")
def trained(model_and_ids):
    """A step trained STEPS steps on one batch, with what it held before the first one."""
    model, ids = model_and_ids
    step = tpuedge.cloud.train_step(
        model, NextTokenLoss(), torch.optim.AdamW(model.parameters(), lr=1e-2), (ids, ids), lora=CONFIG
    )
    before = {
        "base": dict(step.base),
        "host": {n: np.array(v) for n, v in step.base.items()},
        "logits": np.asarray(step.evaluate(ids, ids)[1][0]),
    }
    losses = [float(step(ids, ids)) for _ in range(STEPS)]
    return step, before, losses


def _adapter_names():
    return sorted(
        f"lm.model.layers.{i}.self_attn.{p}.{a}.weight"
        for i in (0, 1)
        for p in ("q_proj", "v_proj")
        for a in ("lora_A", "lora_B")
    )


def test_only_the_adapters_train_and_own_optimizer_state(trained):
    step, before, _ = trained
    assert sorted(step.state["params"]) == _adapter_names()
    adapters = step.adapters()
    assert adapters["lm.model.layers.0.self_attn.q_proj.lora_A.weight"].shape == (4, 64)
    assert adapters["lm.model.layers.0.self_attn.v_proj.lora_B.weight"].shape == (32, 4)
    # AdamW's two moments per adapter and scalars (count, lr): no leaf of a base weight's shape
    tensors = [leaf for leaf in jax.tree.leaves(step.state["opt_state"]) if leaf.ndim]
    assert {leaf.shape for leaf in tensors} == {a.shape for a in adapters.values()}
    assert sum(leaf.size for leaf in tensors) == 2 * sum(a.size for a in adapters.values())
    # the base weights: never donated (still alive), bit-identical after the steps
    assert all(not array.is_deleted() for array in before["base"].values())
    for name, value in step.base.items():
        np.testing.assert_array_equal(np.asarray(value), before["host"][name], err_msg=name)


def test_step_zero_is_the_base_model_and_the_loss_falls(trained, base_logits):
    step, before, losses = trained
    np.testing.assert_allclose(before["logits"], base_logits, atol=1e-4, rtol=0)  # B starts at zero
    assert step.step_count == STEPS
    assert losses[-1] < 0.5 * losses[0], losses


def test_merged_program_computes_the_adapted_model(trained, model_and_ids, base_logits):
    step, _, _ = trained
    model, ids = model_and_ids
    merged = step.merged_program()
    got = merged.run(ids.numpy())[0]
    adapted = np.asarray(step.evaluate(ids, ids)[1][0])  # the LoRA forward in JAX
    np.testing.assert_allclose(got, adapted, atol=1e-4, rtol=0)
    assert np.abs(got - base_logits).max() > 1.0
    # same graph, other weights: the targeted ones only
    assert merged.op_histogram == tpuedge.export(model, (ids,)).op_histogram
    state = merged.exported_program.state_dict
    q = "lm.model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(state[q], model.get_parameter(q))
    assert torch.equal(
        state["lm.model.layers.0.self_attn.k_proj.weight"],
        model.get_parameter("lm.model.layers.0.self_attn.k_proj.weight"),
    )
    # the torch copy with the adapters folded in computes the same; the user's model is untouched
    with torch.no_grad():
        np.testing.assert_allclose(step.merged_module()(ids).numpy(), got, atol=1e-5, rtol=0)
        np.testing.assert_allclose(model(ids).numpy(), base_logits, atol=1e-5, rtol=0)


def test_merged_program_builds_for_android_and_runs_on_litert(trained, model_and_ids, tmp_path):
    step, _, _ = trained
    _, ids = model_and_ids
    merged = step.merged_program(batch_size=1)
    artifact = tpuedge.build(merged, "android", tmp_path / "android", quantize="none")
    assert (tmp_path / "android" / "model.tflite").is_file()
    want = merged.run(ids[:1].numpy())[0]
    got = artifact.run(ids[:1].numpy())[0]
    np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max(), rtol=0)


def test_bf16_trains_the_adapters_and_adapters_load_from_a_file(trained, model_and_ids, tmp_path):
    model, ids = model_and_ids
    step = tpuedge.cloud.train_step(
        model,
        NextTokenLoss(),
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        (ids, ids),
        lora=CONFIG,
        precision="bf16",
    )
    assert "bf16" in step.lower().as_text()
    losses = [float(step(ids, ids)) for _ in range(15)]
    assert losses[-1] < 0.7 * losses[0], losses
    assert all(str(v.dtype) == "float32" for v in step.state["params"].values())  # f32 master adapters
    # a saved adapter file holds the adapters by peft's names; another step of the same config loads it
    source = trained[0]
    path = source.save_adapters(tmp_path / "adapters.safetensors")
    step.load_adapters(path)
    for name, value in source.adapters().items():
        np.testing.assert_array_equal(step.adapters()[name], value)
    partial = dict(list(source.adapters().items())[:2])
    write_safetensors(tmp_path / "partial.safetensors", partial)
    with pytest.raises(UserError, match="other adapters than this step trains"):
        step.load_adapters(tmp_path / "partial.safetensors")


def test_targets_and_options_that_cannot_work_are_user_errors(model_and_ids):
    model, ids = model_and_ids
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def build(lora, **kwargs):
        return tpuedge.cloud.train_step(model, NextTokenLoss(), kwargs.pop("opt", opt), (ids, ids), lora=lora, **kwargs)

    with pytest.raises(
        UserError, match=r"'qproj' match no module of CausalLMLogits.*q_proj, k_proj, v_proj, o_proj, gate_proj"
    ):
        build(LoraConfig(targets=("q_proj", "qproj")))
    with pytest.raises(UserError, match=r"'input_layernorm' names weights that are not 2-D .*\[64\]"):
        build(LoraConfig(targets=("input_layernorm",)))
    with pytest.raises(UserError, match="not both"):
        build(CONFIG, quantize="int8")
    with pytest.raises(UserError, match="pass a tpuedge.cloud.LoraConfig"):
        build({"rank": 8})
    mlp_only = torch.optim.AdamW([p for n, p in model.named_parameters() if ".mlp." in n])
    with pytest.raises(UserError, match="no param group holding lm.model.layers.0.self_attn.q_proj.weight"):
        build(CONFIG, opt=mlp_only)
    with pytest.raises(UserError, match="rank"):
        LoraConfig(rank=0)
    with pytest.raises(UserError, match="targets"):
        LoraConfig(targets=())
