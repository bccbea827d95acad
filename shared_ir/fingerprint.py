"""Content fingerprint of an exported program: sha256 over a canonical graph text and the weights.

Node names, op names, argument structure and the graph signature go in; stack traces,
timestamps and object ids don't, so the hash is the same in every process and after a
save/load round trip, and changes when any op or any weight changes.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["fingerprint", "fingerprint_tensors", "canonical_graph_text"]

_VERSION = b"tpuedge-ir-v1\n"


def _render(value: Any) -> str:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return "%" + value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_render(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_render(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def canonical_graph_text(ep) -> str:
    from tpuedge.shared_ir.op_registry import op_key

    lines = []
    for node in ep.graph.nodes:
        target = op_key(node.target) if node.op == "call_function" else str(node.target)
        val = node.meta.get("val")
        typ = ""
        if hasattr(val, "shape") and hasattr(val, "dtype"):
            typ = f" : {val.dtype}{list(val.shape)}"
        lines.append(f"{node.op} %{node.name} = {target}{_render(node.args)} {_render(node.kwargs)}{typ}")
    sig = ep.graph_signature
    for spec in sig.input_specs:
        lines.append(f"input {spec.kind.name} {spec.arg.name} -> {spec.target}")
    for spec in sig.output_specs:
        lines.append(f"output {spec.kind.name} {getattr(spec.arg, 'name', spec.arg)} -> {spec.target}")
    return "\n".join(lines)


def _tensor_bytes(t) -> memoryview:
    """The tensor's bytes, viewed in place: a copy of each weight to hash it (`tobytes`) left its
    size behind in the process's peak memory (DistilBERT's 23 MB embedding: +29 MB)."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return memoryview(t.numpy().reshape(-1)).cast("B")


def fingerprint_tensors(digest, ep) -> None:
    """Feed `ep`'s weights and tensor constants to `digest`, by name."""
    tensors = dict(ep.state_dict)
    tensors.update({f"const:{k}": v for k, v in ep.constants.items() if hasattr(v, "shape")})
    for name in sorted(tensors):
        t = tensors[name]
        digest.update(f"\n{name} {t.dtype} {list(t.shape)}\n".encode())
        digest.update(_tensor_bytes(t))


def fingerprint(ep) -> str:
    h = hashlib.sha256(_VERSION)
    h.update(canonical_graph_text(ep).encode())
    fingerprint_tensors(h, ep)
    return h.hexdigest()
