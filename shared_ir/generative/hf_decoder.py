"""A transformers causal LM as a decoder that follows tpuedge's protocol (decoder.py).

    decoder = HFDecoder(AutoModelForCausalLM.from_pretrained(folder))

The model runs as it is, through transformers' own public extension points:
  - the KV cache is a `transformers.cache_utils.Cache` whose layers hold the caches given as
    inputs and write each step's keys and values with `tpuedge.cache_write`, so the new caches
    are outputs of the graph, not mutated buffers;
  - the attention mask is built here from `input_pos` (causal, and a window for a model's
    sliding-window layers) and given as a prepared 4-D mask (a dict per layer type where the
    model has several), which transformers passes through untouched;
  - attention runs a function registered in `transformers.AttentionInterface` that reads the
    shared key/value heads of grouped-query attention without repeating them: the queries of a
    group are stacked instead. Repeating the cache was a GATHER of the whole cache per layer
    and step in LiteRT.
Families tested: Llama (SmolLM2), Qwen2, Qwen3, Gemma 3, GPT-2.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.cache_ops import cache_write

__all__ = ["HFDecoder", "is_hf_causal_lm", "ATTENTION"]

ATTENTION = "tpuedge_grouped"  # the name registered in transformers.AttentionInterface
_CACHE_DIM = 2  # [1, kv_heads, cache_length, head_dim], the layout transformers computes keys in
_MASKED = -1e9  # additive mask value: finite, so a fully masked row of a padded prefill stays finite


def is_hf_causal_lm(obj: Any) -> bool:
    """A transformers model with a language-model head (`...ForCausalLM`, GPT-2's `LMHeadModel`)."""
    if "transformers" not in sys.modules:  # no transformers model exists yet; importing it costs 5-15 s
        return False
    try:
        from transformers import GenerationMixin, PreTrainedModel
    except ImportError:  # pragma: no cover - transformers is optional
        return False
    return isinstance(obj, PreTrainedModel) and isinstance(obj, GenerationMixin)


def _grouped_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """Attention over the whole cache, the heads of a key/value group stacked as rows.

    query [B, H, T, D]; key, value [B, KVH, S, D]; attention_mask [B, 1, T, S] additive.
    Returns [B, T, H, D] as transformers' attention functions do."""
    if kwargs.get("s_aux") is not None:
        raise UserError(
            f"{type(module).__name__} uses attention sinks (s_aux), which tpuedge's decoder capture does not "
            "lower; capture a model without them."
        )
    batch, heads, steps, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    q = query.reshape(batch, kv_heads, groups * steps, dim)
    # einsum, not matmul(q, key.transpose(2, 3)): LiteRT then reads the cache as it is stored
    # instead of transposing all of it every step (a TRANSPOSE per layer; 4 ms of a 30 ms decode)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, key) * (dim**-0.5 if scaling is None else scaling)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[:, :, :, :length]
        scores = scores + (mask.repeat(1, 1, groups, 1) if groups > 1 else mask)
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", probs, value)  # [B, KVH, G*T, D]
    return out.reshape(batch, heads, steps, dim).transpose(1, 2), None


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _grouped_attention)


def _cache_classes():
    """The Cache and layer classes, defined on first use (transformers is imported only then)."""
    from transformers.cache_utils import Cache, CacheLayerMixin

    class InputCacheLayer(CacheLayerMixin):
        """One layer's caches, given as graph inputs; `update` writes the step into new tensors."""

        is_compileable = True

        def __init__(self, keys, values, input_pos, sliding: bool):
            super().__init__()
            self.keys, self.values, self.input_pos = keys, values, input_pos
            self.is_sliding = sliding
            self.is_initialized = True

        def lazy_initialization(self, key_states, value_states) -> None:
            pass

        def update(self, key_states, value_states, *args, **kwargs):
            if key_states.shape[1] != self.keys.shape[1] or key_states.shape[3] != self.keys.shape[3]:
                raise UserError(
                    f"the model computes keys of {key_states.shape[1]} heads x {key_states.shape[3]} but its cache holds "
                    f"{self.keys.shape[1]} x {self.keys.shape[3]}: its config's num_key_value_heads / head_dim do not "
                    "describe its attention; tpuedge sizes the cache from them."
                )
            self.keys = cache_write(self.keys, key_states, self.input_pos, _CACHE_DIM)
            self.values = cache_write(self.values, value_states, self.input_pos, _CACHE_DIM)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return 0

        def get_max_length(self) -> int:
            return self.keys.shape[_CACHE_DIM]

        def get_max_cache_shape(self) -> int:
            return self.keys.shape[_CACHE_DIM]

        def get_mask_sizes(self, *args, **kwargs):
            return self.keys.shape[_CACHE_DIM], 0

    class InputCache(Cache):
        def __init__(self, layers):
            super().__init__(layers=layers)

    return InputCacheLayer, InputCache


class HFDecoder(torch.nn.Module):
    """`model` (a transformers causal LM) behind the decoder protocol; see the module docstring."""

    def __init__(self, model):
        super().__init__()
        if not is_hf_causal_lm(model):
            raise UserError(f"{type(model).__name__} is not a transformers causal LM (no language-model head).")
        self.lm = model
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.family = getattr(config, "model_type", "") or type(model).__name__
        self.vocab_size = int(config.vocab_size)
        heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        self.layers = int(config.num_hidden_layers)
        self.layer_types = list(getattr(config, "layer_types", None) or ["full_attention"] * self.layers)
        window = getattr(config, "sliding_window", None)
        self.sliding_windows = [int(window) if t == "sliding_attention" and window else None for t in self.layer_types]
        unknown = sorted(set(self.layer_types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise UserError(
                f"{type(model).__name__} has layers of type {', '.join(unknown)}; tpuedge's decoder capture takes "
                "attention layers only (full or sliding-window), with a key/value cache each."
            )
        if getattr(config, "scale_attn_by_inverse_layer_idx", False):
            raise UserError(
                f"{type(model).__name__} scales attention by the inverse layer index, which the capture does not lower."
            )

    def kv_cache(self, cache_length: int) -> list[torch.Tensor]:
        dtype = next(self.lm.parameters()).dtype
        shape = (1, self.kv_heads, cache_length, self.head_dim)
        return [torch.zeros(shape, dtype=dtype) for _ in range(2 * self.layers)]

    def _masks(self, input_pos, length: int, dtype):
        positions = torch.arange(length, dtype=input_pos.dtype)[None, :]
        query = input_pos[:, None]
        masks = {}
        for layer_type, window in sorted(set(zip(self.layer_types, self.sliding_windows)), key=str):
            allowed = positions <= query
            if window is not None:
                allowed = allowed & (positions > query - window)
            masks[layer_type] = torch.where(allowed, 0.0, _MASKED).to(dtype)[None, None]
        return masks

    def forward(self, tokens, input_pos, *kv_cache):
        layer_class, cache_class = _cache_classes()
        layers = [
            layer_class(kv_cache[2 * i], kv_cache[2 * i + 1], input_pos, window is not None)
            for i, window in enumerate(self.sliding_windows)
        ]
        masks = self._masks(input_pos, kv_cache[0].shape[_CACHE_DIM], kv_cache[0].dtype)
        mask = masks if len(masks) > 1 else next(iter(masks.values()))
        out = self.lm(
            input_ids=tokens,
            position_ids=input_pos[None, :].to(torch.long),
            attention_mask=mask,
            cache=cache_class(layers),
            use_cache=True,
        )
        caches = [t for layer in layers for t in (layer.keys, layer.values)]
        return (out.logits, *caches)


class attention_as_captured:
    """While held, `decoder.lm` runs tpuedge's grouped attention; its own setting is restored after."""

    def __init__(self, decoder: HFDecoder):
        self.model = decoder.lm

    def __enter__(self):
        _register_attention()
        self.before = self.model.config._attn_implementation
        self.model.set_attn_implementation(ATTENTION)
        return self

    def __exit__(self, *exc) -> None:
        self.model.set_attn_implementation(self.before)
