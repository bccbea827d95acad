"""Builds of 69 HF transformers architectures, tiny random configs, for android and mcu.

    python bench/hf_arch_builds.py                        # all (about 30 minutes on 2 cores)
    python bench/hf_arch_builds.py bert_mask t5_encoder --targets mcu

Where bench/arch_survey.py only checks ops, this converts: android `dynamic-int8`, `int8` and
`auto` (each against its accuracy budget), and `mcu` (integer for TFLite-Micro, written
even below its budget so the table shows the measured cosine). Each model is a random-init
config a few layers deep (hidden size 32) with 16 tokens, a padded attention mask where it
takes one, and 32 calibration samples of the same kind (seed 100+). Random weights: the
numbers say whether an architecture converts and runs, not what a pretrained model scores.
Writes bench/results/hf_arch_builds.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's tpuedge wins over an installed copy

TOKENS = 16
TARGETS = ("android:dynamic-int8", "android:int8", "android:auto", "mcu")
# also accepted by --targets: the cloud backend's export and its self-check against torch
OTHER_TARGETS = ("cloud-tpu",)
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _ids():
    import torch

    return torch.randint(0, 100, (1, TOKENS))


def _mask():
    import torch

    mask = torch.ones(1, TOKENS, dtype=torch.long)
    mask[0, -3:] = 0
    return mask


def _audio():
    import torch

    return torch.randn(1, 1600)


def _image(side=32):
    import torch

    return torch.randn(1, 3, side, side)


def _cases() -> dict:
    """name -> () -> (module, example inputs, output attribute or None)."""
    import torch
    import transformers as T

    text = lambda: (_ids(), _mask())  # noqa: E731
    conv_audio = dict(
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        **_SMALL,
    )
    return {
        "gpt2": lambda: (
            T.GPT2LMHeadModel(
                T.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64, use_cache=False)
            ),
            (_ids(),),
            "logits",
        ),
        "bert_mask": lambda: (T.BertModel(T.BertConfig(vocab_size=100, **_SMALL)), text(), None),
        "roberta": lambda: (T.RobertaModel(T.RobertaConfig(vocab_size=100, **_SMALL)), text(), None),
        "albert": lambda: (T.AlbertModel(T.AlbertConfig(vocab_size=100, embedding_size=16, **_SMALL)), text(), None),
        "electra": lambda: (T.ElectraModel(T.ElectraConfig(vocab_size=100, embedding_size=16, **_SMALL)), text(), None),
        "mobilebert": lambda: (
            T.MobileBertModel(
                T.MobileBertConfig(
                    vocab_size=100,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    embedding_size=16,
                    intra_bottleneck_size=16,
                    true_hidden_size=16,
                )
            ),
            text(),
            None,
        ),
        "deberta_v2": lambda: (T.DebertaV2Model(T.DebertaV2Config(vocab_size=100, **_SMALL)), text(), None),
        "t5_encoder": lambda: (
            T.T5EncoderModel(T.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)),
            text(),
            None,
        ),
        "bart_encoder": lambda: (
            T.BartModel(
                T.BartConfig(
                    vocab_size=100,
                    d_model=32,
                    encoder_layers=2,
                    decoder_layers=2,
                    encoder_attention_heads=2,
                    decoder_attention_heads=2,
                    encoder_ffn_dim=64,
                    decoder_ffn_dim=64,
                )
            ).get_encoder(),
            text(),
            None,
        ),
        "distilbert_cls": lambda: (
            T.DistilBertForSequenceClassification(
                T.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64)
            ),
            text(),
            "logits",
        ),
        "llama": lambda: (
            T.LlamaForCausalLM(
                T.LlamaConfig(
                    vocab_size=100,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    num_key_value_heads=1,
                    intermediate_size=64,
                    use_cache=False,
                )
            ),
            (_ids(),),
            "logits",
        ),
        "qwen2": lambda: (
            T.Qwen2ForCausalLM(
                T.Qwen2Config(
                    vocab_size=100,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    num_key_value_heads=1,
                    intermediate_size=64,
                    use_cache=False,
                )
            ),
            (_ids(),),
            "logits",
        ),
        "wav2vec2": lambda: (T.Wav2Vec2Model(T.Wav2Vec2Config(**conv_audio)), (_audio(),), None),
        "hubert": lambda: (T.HubertModel(T.HubertConfig(**conv_audio)), (_audio(),), None),
        "whisper_encoder": lambda: (
            T.WhisperModel(
                T.WhisperConfig(
                    vocab_size=100,
                    d_model=32,
                    encoder_layers=2,
                    decoder_layers=2,
                    encoder_attention_heads=2,
                    decoder_attention_heads=2,
                    encoder_ffn_dim=64,
                    decoder_ffn_dim=64,
                    num_mel_bins=16,
                    max_source_positions=50,
                    pad_token_id=0,
                    bos_token_id=1,
                    eos_token_id=2,
                    decoder_start_token_id=1,
                )
            ).get_encoder(),
            (torch.randn(1, 16, 100),),
            None,
        ),
        "clip_vision": lambda: (
            T.CLIPVisionModel(
                T.CLIPVisionConfig(
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    image_size=32,
                    patch_size=8,
                )
            ),
            (_image(),),
            None,
        ),
        "swin": lambda: (
            T.SwinModel(
                T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4)
            ),
            (_image(),),
            None,
        ),
        "convnext": lambda: (
            T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
            (_image(),),
            None,
        ),
        "resnet": lambda: (
            T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
            (_image(),),
            None,
        ),
        "mobilevit": lambda: (
            T.MobileViTModel(
                T.MobileViTConfig(
                    image_size=64, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]
                )
            ),
            (_image(64),),
            None,
        ),
        # relative position index built in forward by in-place writes through views
        "beit": lambda: (
            T.BeitModel(T.BeitConfig(image_size=32, patch_size=8, use_relative_position_bias=True, **_SMALL)),
            (_image(),),
            None,
        ),
        "dinov2": lambda: (T.Dinov2Model(T.Dinov2Config(image_size=32, patch_size=8, **_SMALL)), (_image(),), None),
        "segformer": lambda: (
            T.SegformerModel(
                T.SegformerConfig(
                    num_encoder_blocks=2,
                    depths=[1, 1],
                    sr_ratios=[2, 1],
                    hidden_sizes=[16, 32],
                    num_attention_heads=[1, 2],
                    patch_sizes=[7, 3],
                    strides=[4, 2],
                    mlp_ratios=[2, 2],
                )
            ),
            (_image(64),),
            None,
        ),
        "yolos": lambda: (
            T.YolosForObjectDetection(
                T.YolosConfig(image_size=[32, 32], patch_size=8, num_detection_tokens=4, **_SMALL)
            ),
            (_image(),),
            "pred_boxes",
        ),
        "gemma": lambda: (
            T.GemmaForCausalLM(
                T.GemmaConfig(
                    vocab_size=100,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    num_key_value_heads=1,
                    head_dim=16,
                    intermediate_size=64,
                    use_cache=False,
                )
            ),
            (_ids(),),
            "logits",
        ),
        "mpnet": lambda: (T.MPNetModel(T.MPNetConfig(vocab_size=100, **_SMALL)), text(), None),
        # decoder LMs with other position schemes, vision and audio families, a BERT variant
        "opt": lambda: (
            T.OPTForCausalLM(
                T.OPTConfig(
                    vocab_size=100,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    ffn_dim=64,
                    word_embed_proj_dim=32,
                    max_position_embeddings=64,
                    use_cache=False,
                )
            ),
            (_ids(),),
            "logits",
        ),
        "gpt_neox": lambda: (
            T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=100, use_cache=False, **_SMALL)),
            (_ids(),),
            "logits",
        ),
        "phi": lambda: (T.PhiForCausalLM(T.PhiConfig(vocab_size=100, use_cache=False, **_SMALL)), (_ids(),), "logits"),
        "mistral": lambda: (
            T.MistralForCausalLM(
                T.MistralConfig(vocab_size=100, num_key_value_heads=1, sliding_window=8, use_cache=False, **_SMALL)
            ),
            (_ids(),),
            "logits",
        ),
        "bloom": lambda: (
            T.BloomForCausalLM(T.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2, n_head=2, use_cache=False)),
            (_ids(),),
            "logits",
        ),
        "falcon": lambda: (
            T.FalconForCausalLM(
                T.FalconConfig(
                    vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, use_cache=False
                )
            ),
            (_ids(),),
            "logits",
        ),
        "qwen3": lambda: (
            T.Qwen3ForCausalLM(
                T.Qwen3Config(vocab_size=100, num_key_value_heads=1, head_dim=16, use_cache=False, **_SMALL)
            ),
            (_ids(),),
            "logits",
        ),
        "modernbert": lambda: (
            T.ModernBertModel(
                T.ModernBertConfig(
                    vocab_size=100,
                    pad_token_id=0,
                    bos_token_id=1,
                    eos_token_id=2,
                    cls_token_id=1,
                    sep_token_id=2,
                    **_SMALL,
                )
            ),
            text(),
            None,
        ),
        "squeezebert": lambda: (
            T.SqueezeBertModel(
                T.SqueezeBertConfig(
                    vocab_size=100,
                    embedding_size=32,
                    q_groups=2,
                    k_groups=2,
                    v_groups=2,
                    post_attention_groups=2,
                    intermediate_groups=2,
                    output_groups=2,
                    **_SMALL,
                )
            ),
            text(),
            None,
        ),
        "deit": lambda: (T.DeiTModel(T.DeiTConfig(image_size=32, patch_size=8, **_SMALL)), (_image(),), None),
        "levit": lambda: (
            T.LevitModel(
                T.LevitConfig(
                    image_size=64,
                    hidden_sizes=[16, 24, 32],
                    num_attention_heads=[1, 2, 2],
                    depths=[1, 1, 1],
                    key_dim=[8, 8, 8],
                    down_ops=[["Subsample", 8, 1, 4, 2, 2], ["Subsample", 8, 2, 4, 2, 2]],
                )
            ),
            (_image(64),),
            None,
        ),
        "mobilenet_v2": lambda: (
            T.MobileNetV2Model(T.MobileNetV2Config(image_size=32, depth_multiplier=0.35)),
            (_image(),),
            None,
        ),
        "efficientnet": lambda: (
            T.EfficientNetModel(
                T.EfficientNetConfig(image_size=32, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320)
            ),
            (_image(),),
            None,
        ),
        "convnextv2": lambda: (
            T.ConvNextV2Model(T.ConvNextV2Config(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
            (_image(),),
            None,
        ),
        "pvt_v2": lambda: (
            T.PvtV2Model(
                T.PvtV2Config(
                    image_size=64,
                    num_encoder_blocks=2,
                    depths=[1, 1],
                    sr_ratios=[2, 1],
                    hidden_sizes=[16, 32],
                    num_attention_heads=[1, 2],
                    patch_sizes=[7, 3],
                    strides=[4, 2],
                    mlp_ratios=[2, 2],
                )
            ),
            (_image(64),),
            None,
        ),
        "poolformer": lambda: (
            T.PoolFormerModel(
                T.PoolFormerConfig(
                    num_encoder_blocks=2,
                    depths=[1, 1],
                    hidden_sizes=[16, 32],
                    patch_sizes=[7, 3],
                    strides=[4, 2],
                    padding=[2, 1],
                    mlp_ratio=2.0,
                )
            ),
            (_image(),),
            None,
        ),
        "siglip_vision": lambda: (
            T.SiglipVisionModel(T.SiglipVisionConfig(image_size=32, patch_size=8, **_SMALL)),
            (_image(),),
            None,
        ),
        "wavlm": lambda: (
            T.WavLMModel(T.WavLMConfig(num_buckets=16, max_bucket_distance=50, **conv_audio)),
            (_audio(),),
            None,
        ),
        # more decoder LMs (transformers 5 builds a constant boolean causal mask for
        # several), recurrent LMs, and vision, audio and text families the list lacked
        "roformer": lambda: (
            T.RoFormerModel(T.RoFormerConfig(vocab_size=100, embedding_size=32, **_SMALL)),
            text(),
            None,
        ),
        "gptj": lambda: (
            T.GPTJForCausalLM(
                T.GPTJConfig(
                    vocab_size=100, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_positions=64, use_cache=False
                )
            ),
            (_ids(),),
            "logits",
        ),
        "codegen": lambda: (
            T.CodeGenForCausalLM(
                T.CodeGenConfig(
                    vocab_size=100,
                    n_embd=32,
                    n_layer=2,
                    n_head=2,
                    rotary_dim=8,
                    n_positions=64,
                    n_ctx=64,
                    use_cache=False,
                )
            ),
            (_ids(),),
            "logits",
        ),
        "gpt_bigcode": lambda: (
            T.GPTBigCodeForCausalLM(
                T.GPTBigCodeConfig(
                    vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, multi_query=True, use_cache=False
                )
            ),
            (_ids(),),
            "logits",
        ),
        "stablelm": lambda: (
            T.StableLmForCausalLM(T.StableLmConfig(vocab_size=100, num_key_value_heads=1, use_cache=False, **_SMALL)),
            (_ids(),),
            "logits",
        ),
        "olmo2": lambda: (
            T.Olmo2ForCausalLM(T.Olmo2Config(vocab_size=100, num_key_value_heads=1, use_cache=False, **_SMALL)),
            (_ids(),),
            "logits",
        ),
        "phi3": lambda: (
            T.Phi3ForCausalLM(
                T.Phi3Config(vocab_size=100, num_key_value_heads=1, pad_token_id=0, use_cache=False, **_SMALL)
            ),
            (_ids(),),
            "logits",
        ),
        "gemma2": lambda: (
            T.Gemma2ForCausalLM(
                T.Gemma2Config(vocab_size=100, num_key_value_heads=1, head_dim=16, use_cache=False, **_SMALL)
            ),
            (_ids(),),
            "logits",
        ),
        "gemma3": lambda: (
            T.Gemma3ForCausalLM(
                T.Gemma3TextConfig(vocab_size=100, num_key_value_heads=1, head_dim=16, use_cache=False, **_SMALL)
            ),
            (_ids(),),
            "logits",
        ),
        "mamba": lambda: (
            T.MambaForCausalLM(
                T.MambaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, state_size=8, use_cache=False)
            ),
            (_ids(),),
            "logits",
        ),
        "rwkv": lambda: (
            T.RwkvForCausalLM(
                T.RwkvConfig(
                    vocab_size=100,
                    hidden_size=32,
                    num_hidden_layers=2,
                    attention_hidden_size=32,
                    intermediate_size=64,
                    context_length=16,
                    use_cache=False,
                )
            ),
            (_ids(),),
            "logits",
        ),
        "xlnet": lambda: (
            T.XLNetModel(
                T.XLNetConfig(vocab_size=100, d_model=32, n_layer=2, n_head=2, d_inner=64, use_mems_eval=False)
            ),
            text(),
            None,
        ),
        "convbert": lambda: (
            T.ConvBertModel(T.ConvBertConfig(vocab_size=100, embedding_size=32, **_SMALL)),
            text(),
            None,
        ),
        "funnel": lambda: (
            T.FunnelBaseModel(
                T.FunnelConfig(vocab_size=100, block_sizes=[1, 1], d_model=32, n_head=2, d_head=16, d_inner=64)
            ),
            text(),
            None,
        ),
        "esm": lambda: (
            T.EsmModel(
                T.EsmConfig(
                    vocab_size=100, pad_token_id=1, mask_token_id=99, position_embedding_type="rotary", **_SMALL
                )
            ),
            text(),
            None,
        ),
        "big_bird_full": lambda: (
            T.BigBirdModel(T.BigBirdConfig(vocab_size=100, attention_type="original_full", **_SMALL)),
            text(),
            None,
        ),
        "ast": lambda: (
            T.ASTModel(
                T.ASTConfig(num_mel_bins=16, max_length=32, patch_size=8, frequency_stride=8, time_stride=8, **_SMALL)
            ),
            (torch.randn(1, 32, 16),),
            None,
        ),
        "data2vec_audio": lambda: (T.Data2VecAudioModel(T.Data2VecAudioConfig(**conv_audio)), (_audio(),), None),
        "sew": lambda: (T.SEWModel(T.SEWConfig(squeeze_factor=2, **conv_audio)), (_audio(),), None),
        "regnet": lambda: (
            T.RegNetModel(T.RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8)),
            (_image(),),
            None,
        ),
        "bit": lambda: (
            T.BitModel(T.BitConfig(embedding_size=8, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_groups=4)),
            (_image(),),
            None,
        ),
        "swinv2": lambda: (
            T.Swinv2Model(
                T.Swinv2Config(
                    image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4
                )
            ),
            (_image(),),
            None,
        ),
        "mobilevitv2": lambda: (
            T.MobileViTV2Model(T.MobileViTV2Config(image_size=64, width_multiplier=0.25)),
            (_image(64),),
            None,
        ),
        "focalnet": lambda: (
            T.FocalNetModel(
                T.FocalNetConfig(
                    image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3]
                )
            ),
            (_image(),),
            None,
        ),
        "glpn": lambda: (
            T.GLPNForDepthEstimation(
                T.GLPNConfig(
                    num_encoder_blocks=2,
                    depths=[1, 1],
                    sr_ratios=[2, 1],
                    hidden_sizes=[16, 32],
                    num_attention_heads=[1, 2],
                    patch_sizes=[7, 3],
                    strides=[4, 2],
                    mlp_ratios=[2, 2],
                    decoder_hidden_size=16,
                )
            ),
            (_image(64),),
            "predicted_depth",
        ),
    }


def _wrapped(module, key):
    """The model's one tensor output: the named attribute, else the first item / last hidden state."""
    import torch

    class Output(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = module

        def forward(self, *args):
            out = self.model(*args)
            if key:
                return getattr(out, key)
            return out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state

    return Output().eval()


def _calibration(program, example, folder: Path) -> str:
    """32 samples like the example: token ids, padded masks (0-5 pad tokens), normal floats."""
    import numpy as np

    rng = np.random.default_rng(100)
    arrays = {}
    for spec, x in zip(program.inputs, example):
        x = x.numpy()
        if x.dtype.kind == "i" and x.max() <= 1:  # an attention mask
            mask = np.ones((32, *x.shape[1:]), np.int64)
            for row, pad in zip(mask, rng.integers(0, 6, 32)):
                row[..., x.shape[-1] - pad :] = 0
            arrays[spec.name] = mask
        elif x.dtype.kind == "i":
            arrays[spec.name] = rng.integers(0, 100, (32, *x.shape[1:]))
        else:
            arrays[spec.name] = rng.standard_normal((32, *x.shape[1:])).astype(np.float32)
    path = folder / f"{program.name}_cal.npz"
    np.savez(path, **arrays)
    return str(path)


def build_row(name: str, make, targets, folder: Path) -> dict:
    import torch

    import tpuedge
    from tpuedge.shared_ir.errors import BudgetError, InternalError, TpuedgeError

    row: dict = {"model": name}
    torch.manual_seed(0)
    try:
        module, example, key = make()
        program = tpuedge.export(_wrapped(module.eval(), key), example, name=name)
    except Exception as exc:  # noqa: BLE001 - a model that does not export is a finding
        row["export"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return row
    calibration = _calibration(program, example, folder)
    for target in targets:
        platform, _, scheme = target.partition(":")
        options = {"calibration": calibration}
        if platform == "cloud-tpu":
            options = {}
        elif platform == "android":
            options["quantize"] = scheme
            if scheme == "dynamic-int8":
                options.pop("calibration")
        else:  # mcu
            options["allow_below_budget"] = True
        start = time.perf_counter()
        try:
            art = tpuedge.build(program, platform, folder / f"{name}_{platform}_{scheme or 'int8'}", **options)
            budget = art.manifest.get("accuracy_budget") or {}
            cosines = (budget.get("measured") or {}).get("sample_cosine_per_output") or []
            status = "ok" if budget.get("met", True) else "below budget"
            row[target] = {"status": status, "cosine": min(cosines) if cosines else None}
        except BudgetError as exc:
            row[target] = {"status": "budget", "why": " ".join(str(exc).split())[:300]}
        except InternalError as exc:
            row[target] = {"status": "CRASH", "why": " ".join(str(exc).split())[:300]}
        except TpuedgeError as exc:
            row[target] = {"status": "refused", "why": " ".join(str(exc).split())[:300]}
        except Exception as exc:  # noqa: BLE001 - a crash is the finding this bench exists for
            row[target] = {"status": "CRASH", "why": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
        row[target]["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument(
        "--targets", default=",".join(TARGETS), help=f"comma separated, from {', '.join(TARGETS + OTHER_TARGETS)}"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "hf_arch_builds.json")
    opts = parser.parse_args()
    os.environ.setdefault("TPUEDGE_NO_CACHE", "1")  # every build converts: the bench is about conversions
    cases = _cases()
    unknown = sorted(set(opts.models) - set(cases))
    targets = [t for t in opts.targets.split(",") if t]
    if unknown or set(targets) - set(TARGETS + OTHER_TARGETS):
        parser.error(f"known models: {', '.join(cases)}; targets: {', '.join(TARGETS + OTHER_TARGETS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="hf_arch.") as tmp:
        for name in opts.models or list(cases):
            row = build_row(name, cases[name], targets, Path(tmp))
            rows.append(row)
            cells = (
                [row["export"]]
                if "export" in row
                else [
                    f"{t}: {row[t]['status']}"
                    + (f" {row[t]['cosine']:.4f}" if row[t].get("cosine") is not None else "")
                    for t in targets
                ]
            )
            print(f"{name:<16} {' | '.join(cells)}", flush=True)
    built = {t: sum(1 for r in rows if r.get(t, {}).get("status") in ("ok", "below budget")) for t in targets}
    print("built: " + ", ".join(f"{t} {n}/{len(rows)}" for t, n in built.items()))
    for r in rows:
        for t in targets:
            if r.get(t, {}).get("status") not in (None, "ok"):
                print(f"  {r['model']} {t}: {r[t]['status']}: {r[t].get('why', '')[:200]}")
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({"targets": targets, "rows": rows, "built": built}, indent=1) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
