"""The decoder protocol: what a module must do to be captured as prefill and decode entry points.

A module follows it when it has

    kv_cache(cache_length: int) -> list[Tensor]
        zero caches [k_0, v_0, k_1, v_1, ...], each [1, kv_heads, cache_length, head_dim]
    forward(tokens, input_pos, *kv_cache) -> (logits, *new_kv_cache)
        tokens: int32 [1, T], the step's token ids; input_pos: int32 [T], their positions,
        consecutive; logits: float [1, T, vocab]. Each new cache is the old one with the step's
        keys or values written at input_pos[0] by `tpuedge.cache_write` (dim 2), and attention
        reads only positions <= input_pos[t] (a sliding-window layer: also > input_pos[t] - window).
    vocab_size: int
    tokenizer (optional): a tokenizer.Tokenizer, which the capture carries to the artifacts

`tpuedge.shared_ir.generative.hf_decoder.HFDecoder` makes a transformers causal LM follow it.
Every entry point of the captured bundle has the same interface, named as LiteRT-LM reads it:
inputs `tokens`, `input_pos`, `kv_cache_k_<i>`, `kv_cache_v_<i>`; outputs `logits` and the
caches under the same names. `prefill_<n>` entries take n tokens, `decode` one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = [
    "DecoderSpec",
    "TOKENS",
    "INPUT_POS",
    "LOGITS",
    "DECODE",
    "prefill_entry",
    "cache_names",
    "check_protocol",
    "parse_lengths",
]

TOKENS = "tokens"
INPUT_POS = "input_pos"
LOGITS = "logits"
DECODE = "decode"
PROTOCOL_HELP = (
    "a decoder module needs `kv_cache(cache_length)` returning its zero caches [k_0, v_0, ...], each "
    "[1, kv_heads, cache_length, head_dim], a `vocab_size` attribute, and `forward(tokens, input_pos, *kv_cache)` "
    "returning (logits, *new_kv_cache) (see tpuedge/shared_ir/generative/decoder.py), or be a transformers causal LM"
)


def prefill_entry(length: int) -> str:
    return f"prefill_{length}"


def cache_names(layers: int) -> list[str]:
    """kv_cache_k_0, kv_cache_v_0, kv_cache_k_1, ...: LiteRT-LM finds the caches by these names."""
    return [f"kv_cache_{kind}_{i}" for i in range(layers) for kind in ("k", "v")]


def parse_lengths(text: str | list | tuple | None, what: str) -> tuple[int, ...]:
    """ "32,128" -> (32, 128): positive, distinct, sorted."""
    if text is None:
        return ()
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        values = sorted({int(str(v).strip()) for v in items if str(v).strip()})
    except ValueError:
        raise UserError(f"{what} takes positive integers separated by commas, e.g. `32,128`; got {text!r}.") from None
    if not values or values[0] < 1:
        raise UserError(f"{what} takes positive integers separated by commas, e.g. `32,128`; got {text!r}.")
    return tuple(values)


@dataclass(frozen=True)
class DecoderSpec:
    """What a captured decoder's entry points take and give, and its cache."""

    vocab_size: int
    cache_length: int
    prefill_lengths: tuple[int, ...]
    cache_shapes: tuple[tuple[int, ...], ...]  # one per cache tensor, in cache_names() order
    cache_dtype: str = "float32"
    sliding_windows: tuple[int | None, ...] = ()  # per layer; None: full attention
    family: str = "protocol"  # the transformers model_type, or "protocol"
    tokenizer: dict = field(default_factory=dict)  # special tokens (tokenizer.py); files live beside the bundle

    @property
    def layers(self) -> int:
        return len(self.cache_shapes) // 2

    @property
    def cache_names(self) -> list[str]:
        return cache_names(self.layers)

    @property
    def entry_names(self) -> list[str]:
        return [prefill_entry(n) for n in self.prefill_lengths] + [DECODE]

    @property
    def cache_bytes(self) -> int:
        """The KV cache's bytes at its dtype (float32: 4 a value)."""
        import numpy as np

        size = np.dtype(self.cache_dtype).itemsize
        return sum(int(np.prod(s)) * size for s in self.cache_shapes)

    def to_json(self) -> dict:
        out = asdict(self)
        out["prefill_lengths"] = list(self.prefill_lengths)
        out["cache_shapes"] = [list(s) for s in self.cache_shapes]
        out["sliding_windows"] = list(self.sliding_windows)
        return out

    @classmethod
    def from_json(cls, data: dict) -> "DecoderSpec":
        return cls(
            vocab_size=int(data["vocab_size"]),
            cache_length=int(data["cache_length"]),
            prefill_lengths=tuple(int(n) for n in data["prefill_lengths"]),
            cache_shapes=tuple(tuple(int(d) for d in s) for s in data["cache_shapes"]),
            cache_dtype=data.get("cache_dtype", "float32"),
            sliding_windows=tuple(data.get("sliding_windows") or ()),
            family=data.get("family", "protocol"),
            tokenizer=dict(data.get("tokenizer") or {}),
        )


def check_protocol(module: Any, name: str) -> None:
    """One UserError naming everything `module` lacks of the protocol."""
    missing = []
    if not callable(getattr(module, "kv_cache", None)):
        missing.append("a `kv_cache(cache_length)` method")
    vocab = getattr(module, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 2:
        missing.append("an integer `vocab_size` attribute")
    if missing:
        raise UserError(
            f"{name} can't be captured as a decoder: it has no {' and no '.join(missing)}; {PROTOCOL_HELP}."
        )


def check_caches(caches: Any, name: str, cache_length: int) -> list:
    """The module's `kv_cache(cache_length)` result, checked: pairs of [1, heads, cache_length, dim] tensors."""
    import torch

    ok = (
        isinstance(caches, (list, tuple))
        and caches
        and len(caches) % 2 == 0
        and all(
            isinstance(c, torch.Tensor) and c.dim() == 4 and c.shape[0] == 1 and c.shape[2] == cache_length
            for c in caches
        )
    )
    if not ok:
        got = (
            [list(c.shape) if isinstance(c, torch.Tensor) else type(c).__name__ for c in caches]
            if isinstance(caches, (list, tuple))
            else type(caches).__name__
        )
        raise UserError(
            f"{name}.kv_cache({cache_length}) returned {got}; it must return an even number of tensors "
            f"[k_0, v_0, k_1, v_1, ...], each [1, kv_heads, {cache_length}, head_dim]; {PROTOCOL_HELP}."
        )
    return list(caches)
