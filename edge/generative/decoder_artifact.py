"""`LiteRTDecoderArtifact`: an android decoder build (model.tflite with prefill and decode
signatures, its tokenizer, manifest.json), generating text in the LiteRT interpreter."""

from __future__ import annotations

from functools import cached_property

from tpuedge.shared_ir.artifact import Artifact
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.generating_artifact import GeneratingArtifact, decoder_report_lines

__all__ = ["LiteRTDecoderArtifact"]


class LiteRTDecoderArtifact(GeneratingArtifact, Artifact):
    runtime_name = "LiteRT (android)"
    layer_runtime = None

    @cached_property
    def tflite(self) -> bytes:
        from tpuedge.edge.generative.decoder_files import MODEL_FILE
        from tpuedge.edge.flatbuffer.tflite_file import read_model

        path = self.directory / MODEL_FILE
        if not path.is_file():
            raise UserError(f"{path} is missing; rebuild with `tpuedge build ... --target android`.")
        data = path.read_bytes()
        read_model(data, path)
        return data

    def step_runner(self, num_threads: int = 1):
        from tpuedge.edge.generative.litert_steps import LiteRTStepRunner

        return LiteRTStepRunner(self.tflite, self.decoder_spec, num_threads=num_threads)

    def run(self, *inputs):
        raise UserError(
            f"{self.directory} is a language model with prefill and decode entry points; use "
            "`tpuedge generate DIR --prompt TEXT` (or `.generate(...)`) instead of running one input."
        )

    def report(self) -> str:
        return "\n".join(decoder_report_lines(self.manifest, self.directory))
