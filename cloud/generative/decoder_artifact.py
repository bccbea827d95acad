"""`CloudDecoderArtifact`: a cloud-tpu decoder build (<step>.jax_export, weights.safetensors, the
tokenizer, manifest.json), generating text on XLA through the exported steps."""

from __future__ import annotations

import json
from functools import cached_property

from tpuedge.shared_ir.artifact import Artifact
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.generating_artifact import GeneratingArtifact, decoder_report_lines

__all__ = ["CloudDecoderArtifact"]


class CloudDecoderArtifact(GeneratingArtifact, Artifact):
    runtime_name = "XLA (cloud-tpu)"
    layer_runtime = None

    @cached_property
    def steps(self):
        """The exported steps with the folder's weights (decoder_export.ExportedSteps)."""
        from tpuedge.cloud.tpu_compile import initialize_jax_quietly

        initialize_jax_quietly()
        import jax

        from tpuedge.cloud.generative.decoder_files import WEIGHTS_FILE, split_weights, step_file
        from tpuedge.cloud.generative.decoder_export import ExportedSteps
        from tpuedge.cloud.safetensors_file import read_safetensors

        exports = {}
        for name in self.manifest["jax_export"]["steps"]:
            path = self.directory / step_file(name)
            if not path.is_file():
                raise UserError(f"{path} is missing; rebuild with `tpuedge build ... --target cloud-tpu`.")
            exports[name] = jax.export.deserialize(bytearray(path.read_bytes()))
        params, buffers = split_weights(read_safetensors(self.directory / WEIGHTS_FILE))
        return ExportedSteps(self.decoder_spec, exports, params, buffers, self.manifest["model_name"], self.tokenizer)

    def step_runner(self, num_threads: int = 1):
        return self.steps.step_runner()  # XLA:CPU sizes its own thread pool

    def run(self, *inputs):
        raise UserError(
            f"{self.directory} is a language model with prefill and decode entry points; use "
            "`tpuedge generate DIR --prompt TEXT` (or `.generate(...)`) instead of running one input."
        )

    @cached_property
    def tpu_plan(self) -> dict | None:
        path = self.directory / "tpu_plan.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def report(self) -> str:
        from tpuedge.cloud.generative.decoder_tpu_plan import describe_decoder_tpu_plan

        lines = decoder_report_lines(self.manifest, self.directory)
        return "\n".join(lines + describe_decoder_tpu_plan(self.tpu_plan, self.manifest["tpu_plan"]))
