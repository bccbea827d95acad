"""The OpenAI API's request bodies, read into what the engine runs (`GenerationParams`).

Read as the OpenAI API documents them: `prompt` (text or token ids, one prompt), `messages`
(rendered with the model's chat template), `max_tokens` (`max_completion_tokens` for chat),
`temperature` (default 1, 0: greedy), `seed`, `stop`, `stream`, `stream_options.include_usage`
and `n` (1 only). Extensions, named as vLLM names them: `top_k`, `ignore_eos` and
`skip_special_tokens` (default true: special tokens' text is left out of the reply).
A field the engine can't honour (`top_p` below 1, `logprobs`, penalties, `best_of`, tools...)
is refused with 400 when it asks for something; fields this server doesn't know are ignored,
as OpenAI-compatible servers do (clients send `user`, `model`, ...).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.generation import Sampling

__all__ = ["ApiError", "GenerationParams", "completion_params", "chat_params"]

COMPLETION_DEFAULT_MAX_TOKENS = 16  # the OpenAI completions API's default
_GREEDY_BELOW = 1e-5  # a temperature this small is greedy (as vLLM reads it)


class ApiError(Exception):
    """An HTTP error with the OpenAI error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


@dataclass(frozen=True)
class GenerationParams:
    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    ignore_eos: bool
    skip_special_tokens: bool = True


# field -> the values that ask for nothing (anything else is refused)
_UNSUPPORTED = {
    "top_p": (None, 1, 1.0),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None,),
    "tools": (None,),
    "tool_choice": (None, "none", "auto"),
    "functions": (None,),
    "function_call": (None, "none", "auto"),
    "response_format": (None, {"type": "text"}),
}


def completion_params(body, artifact) -> GenerationParams:
    body = _object(body)
    if "prompt" not in body:
        raise ApiError(400, "`prompt` is required: text, or a list of token ids.", param="prompt")
    ids = _prompt_ids(body["prompt"], artifact)
    return _params(body, ids, artifact, _optional_int(body, "max_tokens"), COMPLETION_DEFAULT_MAX_TOKENS)


def chat_params(body, artifact) -> GenerationParams:
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, '`messages` must be a non-empty list of {"role": ..., "content": ...}.', param="messages")
    if artifact.tokenizer is None:
        raise ApiError(
            400, "This model was built without a tokenizer, so it can't read chat messages.", param="messages"
        )
    rendered = [{"role": _role(m, i), "content": _content(m, i)} for i, m in enumerate(messages)]
    try:
        ids = artifact.tokenizer.encode(artifact.tokenizer.render_chat(rendered))
    except UserError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    given = _optional_int(body, "max_completion_tokens")
    return _params(body, ids, artifact, given if given is not None else _optional_int(body, "max_tokens"), None)


def _params(body: dict, ids: list[int], artifact, max_tokens: int | None, default_max: int | None) -> GenerationParams:
    for name, harmless in _UNSUPPORTED.items():
        value = body.get(name)
        if value not in harmless and value not in ({}, []):
            raise ApiError(400, f"`{name}` is not supported by this server (tpuedge serve); leave it out.", param=name)
    n = body.get("n", 1)
    if n not in (None, 1) or isinstance(n, bool):
        raise ApiError(
            400, "`n` must be 1: this server gives one choice per request (send several requests instead).", param="n"
        )
    cache = artifact.decoder_spec.cache_length
    room = cache - len(ids)
    if room < 1:
        raise ApiError(
            400,
            f"The prompt is {len(ids)} tokens, but this model's context (its KV cache, built with "
            f"--cache-length {cache}) holds {cache} tokens, prompt and reply together: give a prompt "
            f"shorter than {cache} tokens.",
            param="prompt" if "prompt" in body else "messages",
        )
    if max_tokens is None:
        max_tokens = room if default_max is None else min(default_max, room)
    elif max_tokens < 1:
        raise ApiError(400, f"`max_tokens` must be at least 1 (got {max_tokens}).", param="max_tokens")
    elif max_tokens > room:
        raise ApiError(
            400,
            f"The prompt's {len(ids)} tokens plus max_tokens {max_tokens} need {len(ids) + max_tokens} positions, "
            f"but this model's context (its KV cache, built with --cache-length {cache}) holds {cache}: "
            f"give max_tokens at most {room}, or a shorter prompt.",
            param="max_tokens",
        )
    temperature = _number(body, "temperature", 1.0)
    top_k = _optional_int(body, "top_k")
    seed = _optional_int(body, "seed")
    if temperature < 0 or (top_k is not None and top_k < -1):
        raise ApiError(
            400,
            "`temperature` must be >= 0 and `top_k` >= 0 (-1 or 0: every token).",
            param="temperature" if temperature < 0 else "top_k",
        )
    vocab = artifact.decoder_spec.vocab_size
    sampling = Sampling(
        temperature if temperature >= _GREEDY_BELOW else 0.0,  # logits / ~0 would overflow: greedy
        0 if not top_k or top_k < 0 or top_k >= vocab else top_k,
        seed % 2**64 if seed is not None else secrets.randbits(32),
    )  # numpy seeds are non-negative
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "`stream_options` must be an object.", param="stream_options")
    return GenerationParams(
        ids,
        max_tokens,
        sampling,
        _stop(body.get("stop")),
        _flag(body, "stream"),
        bool(options.get("include_usage")),
        _flag(body, "ignore_eos"),
        _flag(body, "skip_special_tokens", True),
    )


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _prompt_ids(prompt, artifact) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        raise ApiError(
            400,
            f"One prompt per request here (got {len(prompt)}); send the others as their own requests "
            "(they are batched together as they arrive).",
            param="prompt",
        )
    if isinstance(prompt, list) and not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        raise ApiError(400, "`prompt` must be text or a list of token ids (integers).", param="prompt")
    if not isinstance(prompt, str | list) or prompt == []:
        raise ApiError(400, "`prompt` must be text or a non-empty list of token ids.", param="prompt")
    try:
        ids = artifact.encode_prompt(prompt)
    except UserError as exc:
        raise ApiError(400, str(exc), param="prompt") from None
    if not ids:
        raise ApiError(
            400, "The prompt encodes to no tokens (this tokenizer adds no BOS): give some text.", param="prompt"
        )
    return ids


def _role(message, index: int) -> str:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ApiError(400, f"messages[{index}] must be an object with a string `role`.", param="messages")
    return message["role"]


def _content(message: dict, index: int) -> str:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ApiError(
        400,
        f'messages[{index}].content must be text or a list of {{"type": "text", "text": ...}} parts '
        "(this model reads text only).",
        param="messages",
    )


def _stop(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, "`stop` must be a string or a list of at most 4 strings.", param="stop")
    return tuple(s for s in stops if s)


def _optional_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ApiError(400, f"`{name}` must be an integer (got {value!r}).", param=name)
    return int(value)


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"`{name}` must be a number (got {value!r}).", param=name)
    return float(value)


def _flag(body: dict, name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"`{name}` must be true or false (got {value!r}).", param=name)
    return value
