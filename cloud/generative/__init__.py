"""Decoder language models on the cloud backend: prefill and decode in JAX, batched and sharded."""

__all__: list[str] = []
