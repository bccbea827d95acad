"""A decoder's tokenizer, as the bundle and every artifact carry it: transformers' `tokenizer.json`
(read by the `tokenizers` library, no transformers import), the special tokens and the chat
template. `encode` adds the special tokens the tokenizer's own post-processor adds, as
transformers does by default: no BOS for SmolLM2, a BOS for Llama-style tokenizers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["Tokenizer", "tokenizer_beside", "TOKENIZER_FILE", "TOKENIZER_META"]

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_META = "tokenizer_meta.json"


@dataclass(frozen=True)
class Tokenizer:
    json_text: str
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    chat_template: str | None = None

    @cached_property
    def _impl(self):
        from tokenizers import Tokenizer as Impl

        return Impl.from_str(self.json_text)

    def encode(self, text: str) -> list[int]:
        return list(self._impl.encode(text).ids)

    def decode(self, ids, *, skip_special_tokens: bool = False) -> str:
        return self._impl.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        return self._impl.id_to_token(int(token_id)) or ""

    @property
    def vocab_size(self) -> int:
        return self._impl.get_vocab_size(with_added_tokens=True)

    def chat_prompt(self, user_text: str) -> str:
        """`user_text` as one user turn in the model's chat template, ready for the assistant's reply."""
        if not self.chat_template:
            raise UserError(
                "This model's tokenizer has no chat template; drop --chat and give the prompt as plain text."
            )
        return self.render_chat([{"role": "user", "content": user_text}])

    def render_chat(self, messages: list[dict]) -> str:
        """`messages` ({"role": ..., "content": ...} each) in the model's chat template, ready for
        the assistant's reply."""
        if not self.chat_template:
            raise UserError(
                "This model's tokenizer has no chat template, so it can't read chat messages; "
                "give the prompt as plain text instead."
            )
        import jinja2

        def raise_exception(message):  # what transformers' chat templates call on messages they refuse
            raise UserError(f"The model's chat template refuses these messages: {message}")

        environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = raise_exception
        try:
            template = environment.from_string(self.chat_template)
            return template.render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=self.token_text(self.bos_token_id) if self.bos_token_id is not None else "",
                eos_token=self.token_text(self.eos_token_ids[0]) if self.eos_token_ids else "",
            )
        except jinja2.TemplateError as exc:
            raise UserError(f"The model's chat template failed on these messages: {exc}") from None

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.meta(), sort_keys=True).encode() + self.json_text.encode()).hexdigest()

    def meta(self) -> dict:
        return {
            "bos_token_id": self.bos_token_id,
            "eos_token_ids": list(self.eos_token_ids),
            "chat_template": self.chat_template,
        }

    def write(self, folder: Path) -> list[str]:
        """tokenizer.json and tokenizer_meta.json in `folder`; returns their names."""
        folder = Path(folder)
        (folder / TOKENIZER_FILE).write_text(self.json_text)
        (folder / TOKENIZER_META).write_text(json.dumps(self.meta(), indent=2, sort_keys=True) + "\n")
        return [TOKENIZER_FILE, TOKENIZER_META]

    @classmethod
    def read(cls, folder: Path) -> "Tokenizer | None":
        folder = Path(folder)
        if not (folder / TOKENIZER_FILE).is_file():
            return None
        meta = json.loads((folder / TOKENIZER_META).read_text()) if (folder / TOKENIZER_META).is_file() else {}
        return cls(
            (folder / TOKENIZER_FILE).read_text(),
            meta.get("bos_token_id"),
            tuple(meta.get("eos_token_ids") or ()),
            meta.get("chat_template"),
        )

    @classmethod
    def from_hf_folder(cls, folder: Path, config: Any = None) -> "Tokenizer | None":
        """The tokenizer of a transformers model folder (None when it has no tokenizer.json)."""
        folder = Path(folder)
        if not (folder / TOKENIZER_FILE).is_file():
            return None
        settings = _json(folder / "tokenizer_config.json")
        template = settings.get("chat_template")
        if not isinstance(template, str) and (folder / "chat_template.jinja").is_file():
            template = (folder / "chat_template.jinja").read_text()
        generation = _json(folder / "generation_config.json")
        model_config = _json(folder / "config.json")

        def first(key):
            for source in (generation, model_config, vars(config) if config is not None else {}):
                if source.get(key) is not None:
                    return source[key]
            return None

        bos, eos = first("bos_token_id"), first("eos_token_id")
        eos_ids = tuple(int(e) for e in (eos if isinstance(eos, list) else [eos] if eos is not None else []))
        return cls(
            (folder / TOKENIZER_FILE).read_text(),
            None if bos is None else int(bos),
            eos_ids,
            template if isinstance(template, str) else None,
        )


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


def tokenizer_beside(model: Any) -> "Tokenizer | None":
    """A protocol module's own `tokenizer` attribute (a Tokenizer), else the tokenizer in a
    transformers model's own folder (`name_or_path`), if it has one there."""
    own = getattr(model, "tokenizer", None)
    if isinstance(own, Tokenizer):
        return own
    folder = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "name_or_path", None)
    if not folder or not Path(str(folder)).is_dir():
        return None
    return Tokenizer.from_hf_folder(Path(str(folder)), getattr(model, "generation_config", None))
