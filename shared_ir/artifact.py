"""What every target's build leaves on disk: artifact files plus a deterministic manifest.json.

`Artifact` is the base the backends subclass; `load(path)` finds the target from the
manifest and lets that target open it. Manifests hold no timestamps or timings, so the
same inputs give byte-identical build folders.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import TensorSpec
from tpuedge.shared_ir.tool_versions import tool_versions  # re-exported: backends' manifests use it

__all__ = [
    "Artifact",
    "MANIFEST",
    "write_manifest",
    "read_manifest",
    "check_integrity",
    "tool_versions",
    "file_entry",
    "load",
]

MANIFEST = "manifest.json"


def file_entry(path: Path) -> dict:
    """Size and sha256 of a written file, read a block at a time: a whole read held another copy
    of the model at the build's end (BERT-base's float .tflite: 434 MB more, the build's peak)."""
    return {"bytes": Path(path).stat().st_size, "sha256": _sha256(path)}


def write_manifest(directory: Path, manifest: dict) -> Path:
    path = Path(directory) / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise UserError(f"{directory} has no {MANIFEST}; point at a folder written by `tpuedge build`.")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); rebuild the artifact with `tpuedge build`.") from exc
    if not isinstance(manifest, dict):
        raise UserError(
            f"{path} holds a JSON {type(manifest).__name__}, not a manifest object; rebuild the artifact with `tpuedge build`."
        )
    return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_integrity(directory: Path, manifest: dict) -> None:
    """The folder is what its build wrote: an IR fingerprint, and every listed file with its sha256.

    A swapped or edited model file would otherwise run (and verify) as the original; a manifest
    without a fingerprint can't be tied to the program it was built from.
    """
    directory = Path(directory)
    where = directory / MANIFEST
    fix = "rebuild the folder with `tpuedge build` (nothing in it was used)"
    if not isinstance(manifest.get("target"), str) or not manifest["target"]:
        raise UserError(f"{where} names no target; it was not written by `tpuedge build`: {fix}.")
    fingerprint = manifest.get("ir_fingerprint")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise UserError(
            f"{where} records no IR fingerprint, so the artifact can't be tied to the program it was built from: {fix}."
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise UserError(f"{where} lists no files with their sha256, so its contents can't be checked: {fix}.")
    bad = []
    for name, entry in sorted(files.items()):
        path = directory / name
        expected = entry.get("sha256") if isinstance(entry, dict) else None
        if Path(name).name != name or not isinstance(expected, str):
            bad.append(f"{name} (malformed entry)")
        elif not path.is_file():
            bad.append(f"{name} (missing)")
        elif _sha256(path) != expected:
            bad.append(f"{name} (sha256 {_sha256(path)[:12]}..., the build recorded {expected[:12]}...)")
    if bad:
        raise UserError(
            f"{directory} does not hold what its build wrote: {'; '.join(bad)}. A file was replaced or edited "
            f"after `tpuedge build`; {fix}."
        )


class Artifact:
    """A built artifact folder. Subclasses implement `run` in the target's real runtime."""

    # How `tpuedge verify` reads this artifact, declared by the artifact so verify names no target:
    # runtime_name labels its tables; layer_runtime says how per-layer values are read
    # ("litert", "tflite-micro" or "xla"; None: the artifact offers no per-layer numerics).
    runtime_name: str = ""
    layer_runtime: str | None = None

    def __init__(self, directory: Path, manifest: dict):
        self.directory = Path(directory)
        self.manifest = manifest

    @property
    def target(self) -> str:
        return self.manifest["target"]

    @property
    def fingerprint(self) -> str:
        return self.manifest["ir_fingerprint"]

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec.from_json(d) for d in self.manifest["inputs"]]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [TensorSpec.from_json(d) for d in self.manifest["outputs"]]

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """Float in, float out, in the target's real runtime."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.directory)!r}, target={self.target!r})"


def load(path: str | Path) -> Any:
    """A build folder (opened by the target its manifest names, after `check_integrity`), a file
    of a build folder (that build), a saved `.pt2` Program, or a bare file a target opens
    (e.g. a `.tflite` without a manifest: its IR and target are unknown, and it says so)."""
    from tpuedge.shared_ir.targets import all_targets, get_target

    path = Path(path)
    if path.is_dir():
        manifest = read_manifest(path)
        check_integrity(path, manifest)
        return get_target(manifest["target"]).load_artifact(path)
    if not path.exists():
        raise UserError(f"{path} does not exist; build an artifact first with `tpuedge build`, or check the path.")
    if path.suffix == ".pt2":
        from tpuedge.shared_ir.program import Program

        return Program.load(path)
    if (path.parent / MANIFEST).is_file():
        manifest = read_manifest(path.parent)
        if path.name in (manifest.get("files") or {}):  # a file of a build folder: open that build
            check_integrity(path.parent, manifest)
            return get_target(manifest["target"]).load_artifact(path.parent)
    openers = [t for t in all_targets().values() if path.suffix in t.opens_files]
    if openers:
        return openers[0].load_file(path)
    known = sorted({s for t in all_targets().values() for s in t.opens_files} | {".pt2"})
    raise UserError(
        f"Don't know how to open {path}: expected a build folder (with {MANIFEST}), or a {', '.join(known)} file."
    )
