"""`McuDecoderArtifact`: an mcu decoder build (the int8 decode step as model.tflite and a C array,
op_resolver.h, the tokenizer, manifest.json), generating text in the TFLite-Micro interpreter."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from tpuedge.shared_ir.artifact import Artifact
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.generating_artifact import GeneratingArtifact, decoder_report_lines

__all__ = ["McuDecoderArtifact"]


class McuDecoderArtifact(GeneratingArtifact, Artifact):
    runtime_name = "TFLite-Micro (mcu)"
    layer_runtime = None

    @property
    def tflite_path(self) -> Path:
        return self.directory / "model.tflite"

    @property
    def arena_bytes(self) -> int:
        return int(self.manifest["arena"]["recommended_bytes"])

    @cached_property
    def tflite(self) -> bytes:
        from tpuedge.edge.flatbuffer.tflite_file import read_model

        path = self.tflite_path
        if not path.is_file():
            raise UserError(f"{path} is missing; rebuild with `tpuedge build ... --target mcu`.")
        data = path.read_bytes()
        read_model(data, path)
        return data

    def step_runner(self, num_threads: int = 1):
        """The decode step in TFLite-Micro with the build's recommended arena (one thread: TFLite-Micro has no others)."""
        from tpuedge.edge.generative.tflm_steps import TflmStepRunner

        return TflmStepRunner(self.tflite, self.decoder_spec, self.arena_bytes, source=self.tflite_path)

    def run(self, *inputs):
        raise UserError(
            f"{self.directory} is a language model's decode step; use `tpuedge generate DIR --prompt TEXT` "
            "(or `.generate(...)`) instead of running one input."
        )

    def report(self) -> str:
        m = self.manifest
        lines = decoder_report_lines(m, self.directory)
        ops = ", ".join(f"{o['op']}x{o['count']}" for o in m["tflm_ops"])
        arena, board = m["arena"], m["board_check"]
        lines.append(f"  TFLite-Micro ops ({len(m['tflm_ops'])}): {ops}")
        lines.append(f"  flash: {m['flash_bytes']:,} bytes (model array, every weight int8)")
        lines.append(
            f"  arena: {arena['measured_bytes']:,} bytes measured (TFLite-Micro, to {arena['bisection_step_bytes']} B), "
            f"recommended {arena['recommended_bytes']:,}; it holds the int8 KV cache ({arena['kv_cache_bytes']:,} "
            "bytes: the decode step's inputs and outputs)"
        )
        runtimes = m["tflm_vs_litert"]
        greedy = runtimes["greedy"]
        counts = ", ".join(f"{r['matching']}/{r['tokens']}" for r in greedy["matching"])
        lines.append(
            f"  TFLite-Micro vs LiteRT (reference kernels), same file: fed the same inputs at "
            f"{runtimes['steps_fed_the_same_inputs']} steps, the same next token at "
            f"{100 * runtimes['same_next_token']:.2f}%, int8 logits at most {runtimes['max_logit_lsb']} LSB apart; "
            f"greedy tokens matching on {greedy['prompts']} prompts: {counts}"
        )
        if board.get("board"):
            lines.append(
                f"  board {board['board']['name']}: fits (flash {m['flash_bytes']:,}/{board['flash_budget_bytes']:,}, "
                f"RAM {board['arena_ram_bytes']:,}/{board['ram_budget_bytes']:,} bytes, {board['reserve_for_application']} "
                "reserved)"
            )
        lines.append(f"  fits built-in boards: {', '.join(board['fits_builtin_boards']) or 'none'}")
        return "\n".join(lines)
