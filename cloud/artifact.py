"""The cloud-tpu build folder and the artifact that runs it on XLA:CPU.

    model.stablehlo.mlir   StableHLO text of the forward (single device, weights as arguments)
    model.jaxexport        jax.export blob for platforms cpu, cuda and tpu: forward(params, buffers, *inputs)
    model.safetensors      the weights those arguments take (torch state-dict names)
    model.layers.jaxexport layers(params, buffers, *inputs) -> {IR node: value}: the intermediates
                           per-layer verify compares (see layer_export.py)
    manifest.json          fingerprint, shapes, dtypes, calling convention, versions (deterministic)
    tpu_compile.json       the deviceless XLA:TPU compile report (only with libtpu); it holds
                           compile wall times, so it is the one file that differs between rebuilds

artifact_writer.py writes the folder; safetensors_file.py reads and writes the weights file
(byte-identical for the same weights); tpu_report.py makes and describes tpu_compile.json.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any

import numpy as np

from tpuedge.cloud.layer_export import LAYERS_FILE
from tpuedge.cloud.safetensors_file import read_safetensors
from tpuedge.cloud.tpu_report import TPU_REPORT_FILE, describe_tpu_report
from tpuedge.shared_ir.artifact import Artifact
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import to_numpy, validate_inputs

__all__ = ["CloudArtifact", "STABLEHLO_FILE", "EXPORT_FILE", "WEIGHTS_FILE", "TPU_REPORT_FILE", "LAYERS_FILE"]

STABLEHLO_FILE = "model.stablehlo.mlir"
EXPORT_FILE = "model.jaxexport"
WEIGHTS_FILE = "model.safetensors"


class CloudArtifact(Artifact):
    """A cloud-tpu build folder; `run` executes model.jaxexport with XLA on the host CPU."""

    runtime_name = "XLA CPU (cloud-tpu)"
    layer_runtime = "xla"

    @cached_property
    def exported(self):
        from tpuedge.cloud.tpu_compile import initialize_jax_quietly

        initialize_jax_quietly()
        import jax

        return jax.export.deserialize(bytearray((self.directory / EXPORT_FILE).read_bytes()))

    @cached_property
    def weights(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(params, buffers) as jax arrays on the run device, named as in the torch state dict."""
        import jax

        tensors = read_safetensors(self.directory / WEIGHTS_FILE)
        device = self.device
        groups = self.manifest["weights"]
        missing = sorted((set(groups["params"]) | set(groups["buffers"])) - set(tensors))
        if missing:
            raise UserError(
                f"{self.directory / WEIGHTS_FILE} lacks {', '.join(missing[:5])}: the folder was modified after "
                "the build; rebuild it with `tpuedge build --target cloud-tpu`."
            )
        params = {n: jax.device_put(tensors[n], device) for n in groups["params"]}
        buffers = {n: jax.device_put(tensors[n], device) for n in groups["buffers"]}
        return params, buffers

    @cached_property
    def device(self):
        """JAX's default device when the blob was exported for its platform (cpu, cuda, tpu),
        else the CPU (a folder built before cuda was among the platforms, on a GPU machine)."""
        import jax

        self.exported  # jax initialised quietly first
        device = jax.devices()[0]
        platform = "cuda" if device.platform == "gpu" else device.platform
        if platform in self.exported.platforms:
            return device
        try:
            return jax.devices("cpu")[0]
        except RuntimeError as exc:
            raise UserError(
                f"{self.directory} was exported for {', '.join(self.exported.platforms)}, and JAX runs on "
                f"{device.platform} only (JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '')!r}); rebuild it with "
                "`tpuedge build --target cloud-tpu`, or allow the CPU with JAX_PLATFORMS=cuda,cpu."
            ) from exc

    @cached_property
    def _call(self):
        import jax

        return jax.jit(self.exported.call)

    @property
    def tpu_compile(self) -> dict | None:
        """The deviceless TPU compile report, or None if the build had no libtpu."""
        path = self.directory / TPU_REPORT_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def _arguments(self, inputs: tuple) -> list:
        import jax

        arrays = validate_inputs(self.inputs, inputs, f"cloud-tpu artifact {self.directory}")
        avals = self.exported.in_avals[-len(arrays) :] if arrays else ()
        return [jax.device_put(np.asarray(a, dtype=aval.dtype), self.device) for a, aval in zip(arrays, avals)]

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """Float in, float out: the exported forward with the folder's weights, on JAX's default
        device (`JAX_PLATFORMS` decides; see `device`)."""
        import jax

        args = self._arguments(inputs)
        params, buffers = self.weights
        with jax.default_device(self.device):
            outputs = self._call(params, buffers, *args)
        return [to_numpy(np.asarray(o)).astype(spec.dtype, copy=False) for o, spec in zip(outputs, self.outputs)]

    @cached_property
    def _layers_call(self):
        import jax

        path = self.directory / LAYERS_FILE
        if not path.is_file():
            raise UserError(
                f"{self.directory} has no {LAYERS_FILE} (built by an older tpuedge), so its layers can't be read "
                "from the artifact; rebuild it with `tpuedge build --target cloud-tpu` for --per-layer."
            )
        self.exported  # jax initialised quietly first
        return jax.jit(jax.export.deserialize(bytearray(path.read_bytes())).call)

    def layer_values(self, *inputs: Any) -> dict[str, np.ndarray]:
        """{IR node name: value} of every layer, from model.layers.jaxexport on XLA:CPU with the
        folder's weights (model.safetensors): the intermediates of what ships."""
        import jax

        args = self._arguments(inputs)
        params, buffers = self.weights
        with jax.default_device(self.device):
            values = self._layers_call(params, buffers, *args)
        return {name: to_numpy(np.asarray(v)) for name, v in values.items()}

    def report(self) -> str:
        m = self.manifest
        lines = [f"cloud-tpu artifact {self.directory} ({m['model_name']}, IR {self.fingerprint[:12]})"]
        for name, entry in sorted(m["files"].items()):
            lines.append(f"  {name:<24} {entry['bytes']:>12,} bytes")
        lines.append("  inputs:  " + ", ".join(s.describe() for s in self.inputs))
        lines.append("  outputs: " + ", ".join(s.describe() for s in self.outputs))
        v = m["verification"]
        lines.append(
            f"  XLA:CPU vs Program.run: max |error| {v['max_abs_error']} over {v['input_batches']} input batches"
            f"; weights are {m['weights']['storage']}"
        )
        lines += describe_tpu_report(self.tpu_compile, m["tpu_compile"])
        return "\n".join(lines)
