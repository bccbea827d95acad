"""The files of a cloud-tpu decoder build, named and laid out in one place (the writer and the
artifact both read them from here)."""

from __future__ import annotations

import numpy as np

__all__ = ["WEIGHTS_FILE", "step_file", "weight_tensors", "split_weights"]

WEIGHTS_FILE = "weights.safetensors"


def step_file(name: str, kind: str = "jax_export") -> str:
    return f"{name}.{kind}"


def weight_tensors(decoder) -> dict[str, np.ndarray]:
    """The safetensors layout: param/<name>, buffer/<entry>/<name>."""
    tensors = {f"param/{n}": np.asarray(v) for n, v in decoder.params.items()}
    for entry, buffers in decoder.buffers.items():
        tensors.update({f"buffer/{entry}/{n}": np.asarray(v) for n, v in buffers.items()})
    return tensors


def split_weights(tensors: dict[str, np.ndarray]) -> tuple[dict, dict[str, dict]]:
    params = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("param/")}
    buffers: dict[str, dict] = {}
    for key, value in tensors.items():
        if key.startswith("buffer/"):
            _, entry, name = key.split("/", 2)
            buffers.setdefault(entry, {})[name] = value
    return params, buffers
