"""The manifest fields every target's decoder build writes the same way (android, mcu, cloud-tpu)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["decoder_manifest"]


def decoder_manifest(target: str, bundle, staging: Path, *, files: list[str], tools, **sections) -> dict:
    """The manifest of a decoder artifact: the common fields (its I/O: the decode entry's) and the bundle's spec."""
    from tpuedge.shared_ir.artifact import file_entry, tool_versions
    from tpuedge.shared_ir.generative.decoder import DECODE

    decode = bundle.entries[DECODE]
    return {
        "target": target,
        "model_name": bundle.name,
        "ir_fingerprint": bundle.fingerprint,
        "inputs": [s.to_json() for s in decode.inputs],
        "outputs": [s.to_json() for s in decode.outputs],
        "decoder": bundle.decoder.to_json(),
        "entries": bundle.entry_names,
        "files": {name: file_entry(Path(staging) / name) for name in files},
        "tool_versions": tool_versions(*tools),
        **sections,
    }
