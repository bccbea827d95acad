"""What every target's build leaves on disk: artifact files plus a deterministic manifest.json.

`Artifact` is the base the backends subclass; `load(path)` finds the target from the
manifest and lets that target open it. Manifests hold no timestamps or timings, so the
same inputs give byte-identical build folders.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import TensorSpec

__all__ = ["Artifact", "MANIFEST", "write_manifest", "read_manifest", "tool_versions", "file_entry", "load"]

MANIFEST = "manifest.json"


def tool_versions(*distributions: str) -> dict[str, str]:
    versions = {}
    for dist in ("tpuedge", "torch", *distributions):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def file_entry(path: Path) -> dict:
    data = Path(path).read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(directory: Path, manifest: dict) -> Path:
    path = Path(directory) / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise UserError(f"{directory} has no {MANIFEST}; point at a folder written by `tpuedge build`.")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); rebuild the artifact with `tpuedge build`.") from exc


class Artifact:
    """A built artifact folder. Subclasses implement `run` in the target's real runtime."""

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
    """An artifact folder (by its manifest's target), a `.tflite` file, or a saved `.pt2` Program."""
    from tpuedge.shared_ir.targets import get_target

    path = Path(path)
    if path.is_dir():
        manifest = read_manifest(path)
        return get_target(manifest["target"]).load_artifact(path)
    if path.suffix == ".pt2":
        from tpuedge.shared_ir.program import Program

        return Program.load(path)
    if path.suffix == ".tflite":
        return get_target("android").load_artifact(path)
    if not path.exists():
        raise UserError(f"{path} does not exist; build an artifact first with `tpuedge build`.")
    raise UserError(f"Don't know how to open {path}: expected a build folder, a .tflite or a .pt2 file.")
