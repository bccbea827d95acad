"""The one manifest writer every target's build uses.

    manifest = build_manifest("mcu", program, staging, files=[...], tools=[...], **target_sections)
    write_build_manifest(staging, manifest)

`build_manifest` fills the fields every artifact has (target, model name, IR fingerprint, I/O
specs, each file's size and sha256, tool versions); `write_build_manifest` checks they are
there, groups repeated op lists, and writes deterministic JSON (sorted keys, no timings).

Repeated ops are grouped: a list under an "ops" key whose entries repeat (an unrolled LSTM
lists the same "FULLY_CONNECTED model/LSTM_rnn" hundreds of times) becomes one "op ×count"
entry per distinct op, in first-seen order. A 1.8 MB manifest for an int8 CRNN came from that.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuedge.shared_ir.artifact import file_entry, tool_versions, write_manifest
from tpuedge.shared_ir.errors import InternalError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["build_manifest", "write_build_manifest", "group_repeated", "REQUIRED_FIELDS", "GROUPED_KEY"]

REQUIRED_FIELDS = ("target", "model_name", "ir_fingerprint", "inputs", "outputs", "files", "tool_versions")
GROUPED_KEY = "ops"
_TIMES = "\u00d7"  # the multiplication sign in "op ×count"


def build_manifest(
    target: str, program: "Program", staging: Path, *, files: Sequence[str], tools: Sequence[str], **sections: Any
) -> dict:
    """The common fields for `program` built for `target`, then the target's own `sections`
    (a section may replace a common field, e.g. android's I/O specs in the model's dtypes)."""
    manifest = {
        "target": target,
        "model_name": program.name,
        "ir_fingerprint": program.fingerprint,
        "inputs": [s.to_json() for s in program.inputs],
        "outputs": [s.to_json() for s in program.outputs],
        "files": {name: file_entry(Path(staging) / name) for name in files},
        "tool_versions": tool_versions(*tools),
    }
    manifest.update(sections)
    return manifest


def group_repeated(items: Sequence[str]) -> list[str]:
    """["A", "B", "A"] -> ["A ×2", "B"]: one entry per distinct item, first-seen order."""
    counts = Counter(items)
    return [item if counts[item] == 1 else f"{item} {_TIMES}{counts[item]}" for item in dict.fromkeys(items)]


def _grouped(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: group_repeated(v)
            if k == GROUPED_KEY and isinstance(v, list) and all(isinstance(i, str) for i in v)
            else _grouped(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_grouped(v) for v in value]
    return value


def write_build_manifest(staging: Path, manifest: dict) -> dict:
    """Check the common fields, group repeated ops, write `manifest.json`; returns what was written."""
    missing = [f for f in REQUIRED_FIELDS if f not in manifest]
    if missing:
        raise InternalError(f"a {manifest.get('target', '?')} manifest lacks {missing}")
    written = _grouped(manifest)
    write_manifest(Path(staging), written)
    return written
