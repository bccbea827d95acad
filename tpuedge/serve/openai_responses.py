"""The OpenAI API's response bodies and stream chunks, as JSON-ready dicts."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Reply",
    "usage",
    "completion_body",
    "completion_chunk",
    "chat_body",
    "chat_chunk",
    "usage_chunk",
    "models_body",
    "model_entry",
    "error_body",
]


@dataclass(frozen=True)
class Reply:
    """What every body and chunk of one request shares."""

    id: str
    created: int
    model: str
    chat: bool

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def head(self, chunk: bool = False) -> dict:
        return {
            "id": self.id,
            "object": self.object + (".chunk" if chunk and self.chat else ""),
            "created": self.created,
            "model": self.model,
        }


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_body(reply: Reply, text: str, finish_reason: str, used: dict) -> dict:
    return {
        **reply.head(),
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        "usage": used,
    }


def completion_chunk(reply: Reply, text: str, finish_reason: str | None = None) -> dict:
    return {
        **reply.head(True),
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def chat_body(reply: Reply, text: str, finish_reason: str, used: dict) -> dict:
    return {
        **reply.head(),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": used,
    }


def chat_chunk(reply: Reply, delta: dict, finish_reason: str | None = None) -> dict:
    return {
        **reply.head(True),
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(reply: Reply, used: dict) -> dict:
    """The last chunk when the client asked for `stream_options.include_usage`: no choices."""
    return {**reply.head(True), "choices": [], "usage": used}


def model_entry(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "tpuedge"}


def models_body(name: str, created: int) -> dict:
    return {"object": "list", "data": [model_entry(name, created)]}


def error_body(message: str, kind: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
