"""A Program's `.pt2` file: torch.export's format with tpuedge's metadata (name, fingerprint,
I/O, trained activation ranges) inside, read back through the build cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tpuedge.shared_ir.errors import UserError

__all__ = ["save_program", "load_program"]

_META_FILE = "tpuedge.json"


def save_program(program, path: str | os.PathLike) -> Path:
    """Write a `.pt2` (torch.export format) with tpuedge's metadata inside; atomic.

    Serialized in memory first: torch names the archive's root folder after the file it
    writes to, so saving straight to a temp file would make every save's bytes differ.
    """
    import io

    import torch

    from tpuedge.shared_ir.atomic import write_bytes_atomic
    from tpuedge.shared_ir.program_snapshot import with_fake_values

    path = Path(path)
    with_fake_values(program.exported_program)  # read from its snapshot: the .pt2 records fake values
    buffer = io.BytesIO()
    torch.export.save(
        program.exported_program, buffer, extra_files={_META_FILE: json.dumps(program.metadata(), sort_keys=True)}
    )
    write_bytes_atomic(path, buffer.getvalue())
    return path


def load_program(cls, path: str | os.PathLike):
    """The program (of class `cls`, Program) a `.pt2` holds. Read through the build cache: the first load of a file's
    bytes stores its snapshot (shared_ir/program_snapshot.py), which later loads read back
    without importing torch._dynamo."""
    from tpuedge.shared_ir.cache_keys import cached_stage, file_digest
    from tpuedge.shared_ir.program_snapshot import decode, encode_if_it_can

    path = Path(path)
    if not path.is_file():
        raise UserError(f"No saved program at {path}; create one with `tpuedge export MODEL -o {path}`.")

    def from_snapshot(payload: bytes):
        exported_program, name, ranges = decode(payload)
        return cls(exported_program, name=name, activation_ranges=ranges)

    # the file's name is in the key: a program saved without one is named after its file
    return cached_stage(
        "program",
        {"pt2": file_digest(path), "file_name": path.stem},
        lambda: _read_pt2(cls, path),
        encode=encode_if_it_can,
        decode=from_snapshot,
    )


def _read_pt2(cls, path: Path):
    import torch

    from tpuedge.shared_ir.held_logs import held_log_records

    extra = {_META_FILE: ""}
    try:
        # torch logs its own traceback before raising; the paragraph below says it all
        with held_log_records("torch.export"):
            ep = torch.export.load(path, extra_files=extra)
    except Exception as exc:
        raise UserError(
            f"{path} is not a readable torch.export .pt2 file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); re-create it with `tpuedge export`."
        ) from exc
    meta = json.loads(extra[_META_FILE]) if extra.get(_META_FILE) else {}
    ranges = None
    if meta.get("activation_ranges"):
        from tpuedge.shared_ir.node_ranges import ActivationRanges

        ranges = ActivationRanges.from_json(meta["activation_ranges"])
    program = cls(ep, name=meta.get("name") or path.stem, activation_ranges=ranges)
    if meta.get("fingerprint") and meta["fingerprint"] != program.fingerprint:
        raise UserError(
            f"{path} was modified after it was saved: its content fingerprint no longer matches "
            "the one recorded at export; re-export the model."
        )
    return program
