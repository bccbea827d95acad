"""mcu for a decoder bundle: its decode step fully int8, the KV cache in the TFLite-Micro arena.

    bundle.lower("mcu", board="nrf52840").compile("build/lm/mcu")

create() answers the cheap questions first: the options, the board, a lower bound of flash and
RAM (the int8 KV cache counted) against it, the decode step's ops against TFLite-Micro's.
compile() quantizes the decode step (edge/generative/int8_decode_step.py), measures its arena
in the real TFLite-Micro interpreter, holds it to the board, measures token agreement with the
float IR in torch (TFLite-Micro running the step, on held-out text), compares TFLite-Micro with
LiteRT on the same file at every step it ran and over greedy continuations
(edge/generative/tflm_vs_litert.py), and writes model.tflite, model_data.cc/.h, op_resolver.h,
the tokenizer and manifest.json atomically.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.quantize.lm_schemes import LMScheme
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.decoder import DECODE

__all__ = ["McuDecoderLowered", "STATIC_INT8", "FILES"]

# the one scheme an mcu LM has: TFLite-Micro runs integer graphs only
STATIC_INT8 = LMScheme("int8", 8, activations="static")
FILES = ("model.tflite", "model_data.cc", "model_data.h", "op_resolver.h")
CALIBRATION_POSITIONS = 256  # decode steps of the float IR the ranges are set on (the search half of the text)
EVAL_POSITIONS = 256  # held-out next-token predictions the budget reads
EVAL_SEQUENCE = 128
GREEDY_PROMPTS, GREEDY_TOKENS = 3, 16  # greedy continuations compared with the float IR
RUNTIME_PROMPTS, RUNTIME_TOKENS = 4, 32  # greedy continuations compared between TFLite-Micro and LiteRT
TOOLS = ("litert-torch", "ai-edge-litert", "ai-edge-quantizer", "tflite-micro")
_CHILD_MODULES = ("tflite_micro", "tpuedge.edge.mcu.tflm_runtime", "tpuedge.edge.mcu.arena_probe")


class McuDecoderLowered:
    def __init__(self, bundle, program, board, symbols, budget, eval_file, estimate, pass_results):
        self.bundle, self.program, self.board, self.symbols = bundle, program, board, symbols
        self.budget, self.eval_file, self.estimate, self.pass_results = budget, eval_file, estimate, pass_results

    @classmethod
    def create(
        cls,
        lm,
        /,
        *,
        board: str | None = None,
        flash_kb: int | None = None,
        ram_kb: int | None = None,
        symbol: str | None = None,
        eval: Any = None,
        min_top1: float | None = None,  # noqa: A002
        max_perplexity_increase: float | None = None,
        allow_below_budget: bool = False,
        **unknown: Any,
    ) -> "McuDecoderLowered":
        from tpuedge.edge.mcu.boards import resolve_board
        from tpuedge.edge.mcu.c_array import symbols_for
        from tpuedge.edge.generative.mcu_lm_budget import check_estimate_fits, estimate_lm
        from tpuedge.edge.mcu.mcu_capability import mcu_passes
        from tpuedge.quantize.lm_budget import LMBudget
        from tpuedge.shared_ir.errors import ProblemsError
        from tpuedge.shared_ir.program import Program
        from tpuedge.shared_ir.stage_times import timed

        if unknown:
            raise UserError(
                f"mcu builds of a language model take no option(s) {', '.join(sorted(unknown))}; "
                "see `tpuedge build --help`."
            )
        resolved = resolve_board(board, flash_kb, ram_kb)
        symbols = symbols_for(lm.name, symbol)
        budget = LMBudget.from_options(
            min_top1=min_top1, max_perplexity_increase=max_perplexity_increase, allow_below_budget=allow_below_budget
        )
        decode = lm.entries[DECODE]
        estimate = estimate_lm(lm, decode)
        check_estimate_fits(lm.name, resolved, estimate)  # the budget answers before any op or conversion
        problems = decode.check("mcu")  # the decode step is all an mcu build converts
        if problems:
            raise ProblemsError(
                f"{lm.name}'s decode step has {len(problems)} problem(s) for TFLite-Micro (target mcu); "
                "nothing was written:",
                problems,
            )
        with timed("mcu IR passes"):
            ep, results = mcu_passes().run(decode.exported_program)
        program = Program(ep, name=f"{lm.name}.decode") if any(r.changed for r in results) else decode
        return cls(lm, program, resolved, symbols, budget, eval, estimate, results)

    def as_text(self) -> str:
        spec = self.bundle.decoder
        return (
            f"# mcu decoder: {self.bundle.name} (bundle {self.bundle.fingerprint[:16]}), the decode step alone, "
            f"cache {spec.cache_length}, int8 (KV cache {self.estimate.cache_bytes:,} bytes, in the arena), board "
            f"{self.board.name if self.board else 'none'}\n"
        )

    def compile(self, out_dir: Any = None):
        from tpuedge.edge.mcu.arena_probe import measure_arena
        from tpuedge.edge.mcu.boards import budget_check
        from tpuedge.edge.mcu.c_array import model_data_cc, model_data_h
        from tpuedge.edge.mcu.child_process import spare_children
        from tpuedge.shared_ir.generative.decoder_manifest import decoder_manifest
        from tpuedge.edge.generative.mcu_decoder_artifact import McuDecoderArtifact
        from tpuedge.edge.generative.mcu_lm_budget import check_measured_fit
        from tpuedge.edge.generative.tflm_steps import (
            LiteRTIntegerStepRunner,
            TflmStepRunner,
            decode_step_io,
            zero_cache,
        )
        from tpuedge.edge.generative.tflm_vs_litert import Lockstep, runtimes_report
        from tpuedge.edge.mcu.op_resolver import op_resolver_h
        from tpuedge.edge.mcu.tflm_model import io_quantization, ops_used
        from tpuedge.quantize.lm_text import prompt_ids
        from tpuedge.shared_ir.atomic import atomic_output_dir
        from tpuedge.shared_ir.manifest import write_build_manifest
        from tpuedge.shared_ir.stage_times import timed

        bundle, spec = self.bundle, self.bundle.decoder
        out = Path(out_dir) if out_dir is not None else Path("build") / bundle.name / "mcu"
        step = self._int8_step()
        tflite = step.tflite
        with spare_children(1, preload=_CHILD_MODULES), timed("arena probe (TFLite-Micro)"):
            # the first step of a fresh cache: the arena is planned once, whatever the step
            first = [np.zeros((1, 1), np.int32), np.zeros(1, np.int32), *zero_cache(decode_step_io(tflite, spec))]
            arena = measure_arena(tflite, first)
        check_measured_fit(bundle.name, self.board, len(tflite), arena.recommended_bytes, self.estimate)  # exit 2
        board_check = budget_check(self.board, len(tflite), arena.recommended_bytes)
        # TFLite-Micro runs every measured step, LiteRT the same inputs beside it (edge/generative/tflm_vs_litert.py)
        lockstep = Lockstep(
            TflmStepRunner(tflite, spec, arena.recommended_bytes), LiteRTIntegerStepRunner(tflite, spec)
        )
        choice = self._measured(lockstep)  # BudgetError (exit 1) below the budget
        with timed("TFLite-Micro vs LiteRT (greedy)"):
            runtimes = runtimes_report(
                bundle.name, lockstep, prompt_ids(bundle.tokenizer, spec.vocab_size, RUNTIME_PROMPTS), RUNTIME_TOKENS
            )
        ops = ops_used(tflite)
        sections = {
            "entries": [DECODE],
            "recipe": {**step.recipe, "lm_scheme": STATIC_INT8.to_json()},
            "quantization": {"io": io_quantization(tflite), "buffers_moved_inline": step.buffers_moved_inline},
            "rewrites": [r.to_json() for r in self.pass_results if r.changed],
            "tflm_ops": [{"op": o.name, "version": o.version, "count": o.count} for o in ops],
            "flash_bytes": len(tflite),
            "arena": {
                **arena.to_json(),
                "kv_cache_bytes": self.estimate.cache_bytes,
                "kv_cache": "inside the arena: the caches are the decode step's inputs and outputs",
            },
            "estimate_before_conversion": self.estimate.to_json(),
            "board_check": board_check,
            "c_symbols": {"array": self.symbols.array, "length": self.symbols.length},
            "sizes": {
                "tflite_bytes": len(tflite),
                "float_tflite_bytes": len(step.float_tflite),
                "parameter_count": bundle.parameter_count,
                "kv_cache_bytes": self.estimate.cache_bytes,
            },
            "accuracy": {**choice.accuracy, "runtime": "TFLite-Micro host interpreter"},
            "accuracy_budget": choice.budget_entry,
            "tflm_vs_litert": runtimes,
        }
        with timed("writing"), atomic_output_dir(out) as stage:
            (stage / "model.tflite").write_bytes(tflite)
            (stage / "model_data.cc").write_text(model_data_cc(tflite, self.symbols, bundle.name))
            (stage / "model_data.h").write_text(model_data_h(self.symbols, bundle.name))
            (stage / "op_resolver.h").write_text(op_resolver_h([o.name for o in ops], bundle.name))
            files = list(FILES) + (bundle.tokenizer.write(stage) if bundle.tokenizer is not None else [])
            manifest = decoder_manifest("mcu", bundle, stage, files=files, tools=TOOLS, **sections)
            manifest = write_build_manifest(stage, manifest)
        return McuDecoderArtifact(out, manifest)

    @cached_property
    def _texts(self) -> dict:
        """The text's two halves: calibration reads one, the accuracy the other (the held-out half)."""
        from tpuedge.quantize.lm_text import HELD_OUT, SEARCH, evaluation_text

        spec = self.bundle.decoder
        length = min(EVAL_SEQUENCE, spec.cache_length)
        return {
            half: evaluation_text(
                self.bundle.tokenizer,
                half=half,
                sequence_length=length,
                vocab_size=spec.vocab_size,
                positions=CALIBRATION_POSITIONS if half == SEARCH else EVAL_POSITIONS,
                text_file=self.eval_file,
            )
            for half in (SEARCH, HELD_OUT)
        }

    def _int8_step(self):
        from tpuedge.edge.generative.int8_decode_step import decode_step_samples, int8_decode_step
        from tpuedge.quantize.lm_text import SEARCH
        from tpuedge.shared_ir.stage_times import timed

        # the calibration reads the half of the text the accuracy does not (its ranges never saw the held-out text)
        with timed("float reference (decode steps for calibration)"):
            samples, ranges = decode_step_samples(self.bundle.reference(), self._texts[SEARCH].sequences)
        return int8_decode_step(self.program, samples, ranges, self.bundle.decoder.cache_names)

    def _measured(self, lockstep):
        """Token agreement of TFLite-Micro's steps (`lockstep`) with the float IR on held-out text, under the budget."""
        from tpuedge.quantize.lm_search import choose_lm_scheme
        from tpuedge.quantize.lm_text import HELD_OUT, SEARCH, prompt_ids
        from tpuedge.shared_ir.stage_times import timed

        spec = self.bundle.decoder
        texts = self._texts
        with timed("token accuracy (TFLite-Micro vs the float IR in torch)"):
            return choose_lm_scheme(
                name=self.bundle.name,
                target="mcu",
                reference=self.bundle.reference(),
                build=lambda scheme: None,
                runner_of=lambda _: lockstep,
                scheme=STATIC_INT8,
                budget=self.budget,
                search_text=texts[SEARCH],
                eval_text=texts[HELD_OUT],
                prompts=prompt_ids(self.bundle.tokenizer, spec.vocab_size, GREEDY_PROMPTS),
                greedy_tokens=GREEDY_TOKENS,
            )
