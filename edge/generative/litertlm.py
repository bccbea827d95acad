"""`--bundle litertlm`: the android decoder as one .litertlm file for the LiteRT-LM runtime.

The file holds the .tflite (signatures `prefill_<n>` and `decode`, inputs `tokens`, `input_pos`
and `kv_cache_k_<i>` / `kv_cache_v_<i>`, output `logits`: the names LiteRT-LM looks up), the
transformers tokenizer, and the LLM metadata: the stop tokens (the model's EOS ids), the start
token only where the tokenizer itself starts a text with the BOS (LiteRT-LM prepends
`start_token` to every prompt; SmolLM2's tokenizer adds none, and a BOS it never saw in that
place changes its answers), the cache length as `max_num_tokens`, and the chat template.
Written with `litert_lm_builder`'s public builder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tpuedge.edge.tool_output import held_tool_output

__all__ = ["write_litertlm", "LITERTLM_FILE", "starts_with_bos"]

LITERTLM_FILE = "model.litertlm"


def starts_with_bos(tokenizer) -> bool:
    """Whether the tokenizer's own encoding starts a text with its BOS token."""
    if tokenizer.bos_token_id is None:
        return False
    ids = tokenizer.encode("x")
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def _metadata(bundle) -> bytes:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2, llm_model_type_pb2

    tokenizer = bundle.tokenizer
    meta = llm_metadata_pb2.LlmMetadata()
    if starts_with_bos(tokenizer):
        meta.start_token.token_ids.ids.append(int(tokenizer.bos_token_id))
    for eos in tokenizer.eos_token_ids:
        meta.stop_tokens.add().token_ids.ids.append(int(eos))
    meta.max_num_tokens = int(bundle.decoder.cache_length)
    meta.llm_model_type.CopyFrom(llm_model_type_pb2.LlmModelType(generic_model=llm_model_type_pb2.GenericModel()))
    if tokenizer.chat_template:
        meta.jinja_prompt_template = tokenizer.chat_template
    return meta.SerializeToString()


def write_litertlm(folder: Path, model_file: str, bundle) -> str:
    """Write `folder/model.litertlm` from `folder/model_file` and the bundle's tokenizer; returns its name."""
    import litert_lm_builder as builder

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="tpuedge-litertlm-") as work:
        work = Path(work)
        (work / "llm_metadata.pb").write_bytes(_metadata(bundle))
        (work / "tokenizer.json").write_text(bundle.tokenizer.json_text)
        with held_tool_output("litert-lm-builder"):
            lm = builder.LitertLmFileBuilder()
            lm.add_system_metadata(builder.Metadata(key="Authors", value="tpuedge", dtype=builder.DType.STRING))
            lm.add_llm_metadata(str(work / "llm_metadata.pb"))
            lm.add_tflite_model(str(folder / model_file), builder.TfLiteModelType.PREFILL_DECODE)
            lm.add_hf_tokenizer(str(work / "tokenizer.json"))
            with open(folder / LITERTLM_FILE, "wb") as stream:
                lm.build(stream)
    return LITERTLM_FILE
