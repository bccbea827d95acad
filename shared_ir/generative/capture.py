"""Capture a decoder once into a ProgramBundle: `prefill_<n>` entries and `decode`, one weight set.

    bundle = export_decoder(model, prefill_lengths=(32, 128), cache_length=1024)

`model` is a transformers causal LM or a module following the decoder protocol (decoder.py).
Each entry point is one torch.export of the same module at its own token count, so every entry
reads the module's own parameter tensors: the backends store each weight once.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.decoder import (
    DECODE,
    INPUT_POS,
    LOGITS,
    TOKENS,
    DecoderSpec,
    cache_names,
    check_caches,
    check_protocol,
    prefill_entry,
)

__all__ = [
    "export_decoder",
    "capture_build_options",
    "position_limit",
    "DEFAULT_PREFILL_LENGTHS",
    "DEFAULT_CACHE_LENGTH",
]

DEFAULT_PREFILL_LENGTHS = (32,)
DEFAULT_CACHE_LENGTH = 256


def capture_build_options() -> list:
    """The decoder capture's `tpuedge build` options, one definition for every target."""
    from tpuedge.shared_ir.targets import BuildOption

    return [
        BuildOption(
            "prefill_lengths",
            "a decoder LM's prefill entry points, tokens each, e.g. 32,128 (default "
            f"{','.join(map(str, DEFAULT_PREFILL_LENGTHS))})",
            str,
            None,
        ),
        BuildOption(
            "cache_length",
            f"a decoder LM's KV cache, in positions (default {DEFAULT_CACHE_LENGTH}, or the "
            "positions the model was trained for where they are fewer)",
            int,
            None,
        ),
        BuildOption(
            "buckets",
            "one entry point per size of an input's axis, weights stored once: INPUT:AXIS=SIZES, "
            "e.g. input_ids:1=16,32,64",
            str,
            None,
        ),
    ]


def _named_steps(decoder, names: list[str], with_logits: bool):
    import torch

    class NamedSteps(torch.nn.Module):
        """The decoder with its outputs named: logits (decode only: a prefill's are never read, and
        dropping them drops the LM head from its graph), then the caches under their input names."""

        def __init__(self):
            super().__init__()
            self.decoder = decoder

        def forward(self, tokens, input_pos, *kv_cache):
            out = self.decoder(tokens, input_pos, *kv_cache)
            if not isinstance(out, (tuple, list)) or len(out) != len(names) + 1:
                got = len(out) if isinstance(out, (tuple, list)) else type(out).__name__
                raise UserError(
                    f"{type(decoder).__name__}.forward returned {got} value(s); a decoder returns (logits, *new_kv_cache): "
                    f"{len(names) + 1} tensors here."
                )
            caches = dict(zip(names, out[1:]))
            return {LOGITS: out[0], **caches} if with_logits else caches

    return NamedSteps().eval()


def _rename_inputs(exported_program, names: list[str]) -> None:
    """User inputs named tokens, input_pos, kv_cache_k_0, ... (torch.export names *args by position)."""
    from torch.export.graph_signature import InputKind, TensorArgument

    user = [spec for spec in exported_program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in exported_program.graph.nodes if n.op == "placeholder"}
    for spec, new in zip(user, names):
        node = nodes[spec.arg.name]
        node.name = node.target = new
        spec.arg = TensorArgument(name=new)
    exported_program.graph_module.recompile()


def _decoder_of(model: Any, name: str):
    """(the protocol module, its family) for a transformers causal LM or a protocol module."""
    from tpuedge.shared_ir.generative.hf_decoder import HFDecoder, is_hf_causal_lm

    if is_hf_causal_lm(model):
        decoder = HFDecoder(model)
        return decoder, decoder.family
    check_protocol(model, name)
    return model, "protocol"


def position_limit(model) -> int | None:
    """The positions a model was trained for (its config's max_position_embeddings), if it says."""
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return limit if isinstance(limit, int) and limit > 0 else None


def _check_lengths(model, prefill_lengths: tuple[int, ...], cache_length: int, name: str) -> None:
    if not prefill_lengths:
        raise UserError(f"{name}: give at least one prefill length (e.g. --prefill-lengths 32).")
    if prefill_lengths[-1] > cache_length:
        raise UserError(
            f"{name}: prefill length {prefill_lengths[-1]} is longer than the cache ({cache_length} positions); "
            f"use prefill lengths up to --cache-length, or a longer cache."
        )
    limit = position_limit(model)
    if limit is not None and cache_length > limit:
        raise UserError(
            f"{name}: --cache-length {cache_length} is past the {limit} positions the model was trained for "
            f"(config.max_position_embeddings); use --cache-length {limit} or less."
        )


def export_decoder(
    model: Any,
    *,
    prefill_lengths=DEFAULT_PREFILL_LENGTHS,
    cache_length: int = DEFAULT_CACHE_LENGTH,
    name: str | None = None,
    tokenizer: Any = None,
):
    """Capture `model` (see the module docstring) into a decoder ProgramBundle.

    tokenizer: a `tpuedge.shared_ir.generative.tokenizer.Tokenizer`, or None to look for one
    beside a transformers model (its `name_or_path` folder)."""
    import torch

    from tpuedge.shared_ir.capture import export
    from tpuedge.shared_ir.generative.bundle import ProgramBundle
    from tpuedge.shared_ir.generative.hf_decoder import HFDecoder, attention_as_captured
    from tpuedge.shared_ir.generative.tokenizer import tokenizer_beside

    name = name or type(model).__name__.lower()
    prefill_lengths = tuple(sorted(set(int(n) for n in prefill_lengths)))
    cache_length = int(cache_length)
    _check_lengths(model, prefill_lengths, cache_length, name)
    decoder, family = _decoder_of(model, type(model).__name__)
    caches = check_caches(decoder.kv_cache(cache_length), type(model).__name__, cache_length)
    dtypes = {str(c.dtype) for c in caches} | {str(p.dtype) for p in decoder.parameters() if p.is_floating_point()}
    if dtypes != {"torch.float32"}:
        raise UserError(
            f"{name} computes in {', '.join(sorted(dtypes))}; the decoder capture takes float32 weights and caches "
            "(the backends choose their own precision): load the model with dtype=torch.float32 or call .float()."
        )
    names = cache_names(len(caches) // 2)
    entries = {}
    holder = attention_as_captured(decoder) if isinstance(decoder, HFDecoder) else _Nothing()
    with holder, torch.no_grad():
        for entry, length in [(prefill_entry(n), n) for n in prefill_lengths] + [(DECODE, 1)]:
            tokens = torch.zeros((1, length), dtype=torch.int32)
            input_pos = torch.arange(length, dtype=torch.int32)
            steps = _named_steps(decoder, names, with_logits=entry == DECODE)
            program = export(steps, (tokens, input_pos, *caches), name=f"{name}.{entry}")
            _rename_inputs(program.exported_program, [TOKENS, INPUT_POS, *names])
            entries[entry] = program
    windows = tuple(getattr(decoder, "sliding_windows", None) or [None] * (len(caches) // 2))
    spec = DecoderSpec(
        vocab_size=int(decoder.vocab_size),
        cache_length=cache_length,
        prefill_lengths=prefill_lengths,
        cache_shapes=tuple(tuple(c.shape) for c in caches),
        cache_dtype=str(caches[0].dtype).removeprefix("torch."),
        sliding_windows=windows,
        family=family,
    )
    if tokenizer is None:
        tokenizer = tokenizer_beside(model)
    return ProgramBundle(entries, name=name, decoder=spec, tokenizer=tokenizer)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
