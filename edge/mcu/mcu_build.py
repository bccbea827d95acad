"""The mcu build: `McuLowered` (checked, rewritten, calibrated) -> `compile` -> `McuArtifact`.

Its parts: evaluation data (mcu_evaluation.py), the two runtimes compared (mcu_runtimes.py),
the verification runs in them (mcu_verification.py), the artifact and its report (mcu_artifact.py).

Everything is measured in memory first (conversion, TFLM run, arena, accuracy, budget); files
are written only when all of it passed, through `atomic_output_dir`. No timings in any file,
so the same inputs give byte-identical folders.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any


from tpuedge.shared_ir.errors import InternalError, ProblemsError, UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.edge.mcu.mcu_artifact import McuArtifact
    from tpuedge.edge.mcu.mcu_runtimes import McuRuntimes
    from tpuedge.shared_ir.program import Program

__all__ = ["McuLowered", "integer_tflite", "FILES"]

FILES = ("model.tflite", "model_data.cc", "model_data.h", "op_resolver.h", "manifest.json")
_MIN_CALIBRATION = 16
# what the build's TFLite-Micro children import before they are needed (edge/mcu/child_process.py)
_CHILD_MODULES = (
    "tflite_micro",
    "tpuedge.edge.mcu.tflm_runtime",
    "tpuedge.edge.mcu.tflm_worker",
    "tpuedge.edge.mcu.arena_probe",
)
_TOOLS = ("litert-torch", "ai-edge-litert", "ai-edge-quantizer", "tflite-micro")


def integer_tflite(
    rewritten: "Program", config, calibration, trained_ranges=None, board=None
) -> tuple[Any, bytes, list[int]]:
    """(converted, tflite with every buffer inline, indices of the buffers moved inline): int8,
    with int16 activations where the search measured them needed unless `config.strict_int8`;
    names module scopes (shared by a scope's tensors), the biases' quantization tables, which
    TFLite-Micro never reads, dropped, and the model written once more by tflite_file.write_model
    (equal vectors, strings and tables once). A `board` whose RAM the all-int8 model's arena
    is over ends the search at its first candidate (boards.check_all_int8_arena_fits)."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.mcu.bias_quantization import drop_bias_quantization
    from tpuedge.edge.litert.convert import program_to_tflite
    from tpuedge.quantize.search_backend import CandidateRuntime
    from tpuedge.edge.mcu.boards import check_all_int8_arena_fits
    from tpuedge.edge.mcu.tflm_candidates import tflm_allocated_bytes, tflm_candidate_outputs, tflm_candidate_problem
    from tpuedge.edge.mcu.tflm_forms import tflm_forms
    from tpuedge.edge.flatbuffer.tensor_names import ScopeNames, share_scope_names
    from tpuedge.edge.mcu.tflm_model import external_buffers, inline_buffers
    from tpuedge.edge.mcu.tflm_runtime import TflmError
    from tpuedge.edge.mcu.tflm_worker import close_worker

    def floor(all_int8: bytes) -> None:  # asked only where a board is named
        try:
            allocated = tflm_allocated_bytes(all_int8)
        except TflmError:  # no figure: the search scores it as failed, the build names the op
            return
        check_all_int8_arena_fits(board, rewritten.name, allocated)

    try:
        converted = program_to_tflite(
            rewritten,
            config,
            calibration,
            target="mcu",
            trained_ranges=trained_ranges,
            report_strict_cost=config.strict_int8,
            candidates=CandidateRuntime(
                "mcu", tflm_candidate_problem, tflm_candidate_outputs, floor if board is not None else None
            ),
        )
    finally:
        close_worker()  # the search's TFLite-Micro worker: not left idle in a long-lived process
    moved = external_buffers(converted.tflite)
    tflite = inline_buffers(converted.tflite)
    if external_buffers(tflite):
        raise InternalError(
            f"{rewritten.name}: buffers {external_buffers(tflite)} are still outside the flatbuffer after inlining"
        )
    tflite, rewritten_forms = tflm_forms(tflite)
    if rewritten_forms:
        converted.recipe["tflm_forms"] = rewritten_forms
    model = tflite_file.read_model(tflite)
    share_scope_names(model, ScopeNames(rewritten.exported_program))
    drop_bias_quantization(model)
    return converted, tflite_file.write_model(model), moved  # every buffer inline: none to carry over


# ---- lowering -------------------------------------------------------------------------------
class McuLowered:
    """A Program checked for TFLite-Micro, rewritten by the mcu passes, with its data loaded."""

    def __init__(
        self,
        program: "Program",
        *,
        calibration: Any = None,
        eval: Any = None,  # noqa: A002 - the CLI flag's name
        board: str | None = None,
        flash_kb: int | None = None,
        ram_kb: int | None = None,
        io_dtype: str = "integer",
        symbol: str | None = None,
        gelu: str = "sigmoid",
        per_channel: bool = True,
        channels_last: bool = True,
        min_cosine: float | None = None,
        min_top1: float | None = None,
        max_drop: float | None = None,
        allow_below_budget: bool = False,
        strict_int8: bool = False,
        budget_outputs: str | None = None,
        rollout: str | None = None,
    ):
        from tpuedge.edge.mcu.boards import check_int8_activations_fit, check_int8_weights_fit, resolve_board
        from tpuedge.edge.mcu.c_array import symbols_for
        from tpuedge.edge.mcu_evaluation import evaluation_from
        from tpuedge.edge.mcu.mcu_capability import mcu_passes
        from tpuedge.quantize.budget import AccuracyBudget
        from tpuedge.quantize.calibration import load_calibration
        from tpuedge.quantize.config import QuantConfig
        from tpuedge.shared_ir.program import Program
        from tpuedge.shared_ir.stage_times import timed

        self.program = program
        # Cheap user errors first, before any conversion.
        self.board = resolve_board(board, flash_kb, ram_kb)
        self.symbols = symbols_for(program.name, symbol)
        self.config = QuantConfig(
            scheme="int8",
            io_dtype=io_dtype or "integer",
            strict_int8=bool(strict_int8),
            float_islands=False,
            per_channel=per_channel,
            channels_last=True if channels_last is None else bool(channels_last),
            min_calibration_samples=_MIN_CALIBRATION,
        )
        check_int8_weights_fit(self.board, program.parameter_count)  # the budget answers before any op
        check_int8_activations_fit(self.board, program)
        problems = program.check("mcu")
        if problems:
            raise ProblemsError(
                f"{program.name} has {len(problems)} problem(s) for TFLite-Micro (target mcu); nothing was written:",
                problems,
            )
        with timed("mcu IR passes"):
            ep, self.pass_results = mcu_passes(gelu or "sigmoid").run(program.exported_program)
        self.rewritten = Program(ep, name=program.name) if any(r.changed for r in self.pass_results) else program
        # explicit only: no evaluation data is guessed from the calibration's module
        self.evaluation = evaluation_from(eval, program)
        self.calibration_source = (
            str(calibration) if isinstance(calibration, (str, Path)) else type(calibration).__name__
        )
        if calibration is None and program.activation_ranges is not None:
            from tpuedge.edge.litert.trained_ranges import TRAINED_RANGES_SOURCE, trained_range_samples

            calibration = trained_range_samples(program, self.evaluation, "mcu")
            self.calibration_source = TRAINED_RANGES_SOURCE
        elif calibration is None:
            raise UserError(
                "The mcu target is always full int8 and needs calibration data to set activation ranges: pass "
                "--calibration data.npz (arrays keyed by input name, samples on the first axis), a .npy, a folder, "
                "or module:function returning input tuples (e.g. examples/digits/model.py:calibration)."
            )
        self.calibration = load_calibration(calibration, program, min_samples=_MIN_CALIBRATION)
        self.budget = AccuracyBudget.from_options(
            min_cosine=min_cosine,
            min_top1=min_top1,
            max_drop=max_drop,
            allow_below_budget=allow_below_budget,
            has_labels=self.evaluation is not None and self.evaluation.labels is not None,
            program=program,
            budget_outputs=budget_outputs,
            rollout=rollout,
            eval_samples=None if self.evaluation is None else len(self.evaluation.samples),
        )
        # the int8 search aims at the budget's top-1 agreement too, where it can read it
        self.config = self.config.replace(target_top1=self.budget.search_top1(program))
        self.held_out: list = []
        if self.evaluation is None:  # accuracy on samples the ranges were not set on
            from tpuedge.quantize.accuracy_samples import split_calibration

            self.calibration, self.held_out = split_calibration(self.calibration, _MIN_CALIBRATION)

    def as_text(self) -> str:
        lines = [f"mcu lowering of {self.program.name} (IR {self.program.fingerprint[:12]})"]
        lines += [f"  pass {r.name}: {r.description}" for r in self.pass_results]
        lines.append(f"  layout: {'NHWC image inputs' if self.config.channels_last else 'as exported (NCHW)'}")
        lines.append(f"  quantization: {self.config.to_json()}")
        lines.append(f"  calibration: {len(self.calibration)} samples from {self.calibration_source}")
        if self.held_out:
            lines.append(f"  accuracy: {len(self.held_out)} samples held out from calibration")
        if self.evaluation:
            lines.append(f"  evaluation: {len(self.evaluation.samples)} samples from {self.evaluation.source}")
        lines.append(f"  board: {self.board.name if self.board else 'none (reports the built-in boards it fits)'}")
        return "\n".join(lines)

    # ---- the build ----------------------------------------------------------------------
    def compile(self, out_dir: Any = None) -> "McuArtifact":
        from tpuedge.edge.mcu.boards import budget_check, fits
        from tpuedge.edge.mcu.c_array import io_comments, model_data_cc, model_data_h
        from tpuedge.edge.mcu.child_process import spare_children
        from tpuedge.edge.mcu.mcu_artifact import McuArtifact
        from tpuedge.edge.mcu.mcu_runtimes import McuRuntimes
        from tpuedge.edge.mcu.mcu_verification import layout_spec
        from tpuedge.edge.mcu.op_resolver import op_resolver_h
        from tpuedge.edge.mcu.tflm_model import io_quantization, ops_used
        from tpuedge.shared_ir.atomic import atomic_output_dir
        from tpuedge.shared_ir.manifest import build_manifest, write_build_manifest
        from tpuedge.shared_ir.stage_times import timed

        name = self.program.name
        out_dir = Path(out_dir) if out_dir is not None else Path("build") / name / "mcu"
        with spare_children(2, preload=_CHILD_MODULES):  # the search's TFLite-Micro worker, the arena probe
            converted, tflite, moved, arena = self._quantized(self.config)
        if self._int16_over_the_board(converted, tflite, arena):
            # int16 tensors doubled the arena past the board: every op int8 instead, if that fits
            # (the accuracy budget then decides: the search aims above it, at its target cosine)
            strict = self._quantized(self.config.replace(strict_int8=True))
            if not fits(self.board, len(strict[1]), strict[3].recommended_bytes):
                # neither fits: the board's answer, with what the smallest of them needs (the int16
                # arena's figure told the user the model needs twice the RAM it does)
                budget_check(self.board, len(strict[1]), strict[3].recommended_bytes)
            dropped = {
                "arena_bytes_with_int16": arena.recommended_bytes,
                "ram_budget_bytes": self.board.ram_budget,
                "int16_groups": [o["group"] for o in converted.recipe.get("non_int8_ops", [])],
            }
            converted, tflite, moved, arena = strict
            converted.recipe["int16_dropped_for_the_board"] = dropped
        # the board first (exit 2): a model below its accuracy budget that fits no board was told
        # only of the budget (Resemblyzer, MobileNetV3-small, DeiT-tiny on esp32s3), and the zoo
        # counted them among the models that fit
        budget = budget_check(self.board, len(tflite), arena.recommended_bytes)
        ops = ops_used(tflite)
        runtime = McuRuntimes(tflite, self.config.channels_last)
        with timed("verification run (TFLite-Micro)"):
            runtime.open_tflm(arena.recommended_bytes)
            verification, measured = self._verify(runtime)
            if self.budget.rollout is not None:  # the budget reads every step of each sequence, state fed back
                from tpuedge.edge.mcu.tflm_rollout import tflm_rollout

                measured = tflm_rollout(self.program, runtime, self.evaluation.samples, self.budget.rollout)
        budget_entry = self._check_budget(measured, converted.recipe)  # BudgetError (exit 1) before anything is written

        sections = {
            "inputs": [layout_spec(s, self.config.channels_last) for s in self.program.inputs],
            "layout": "NHWC" if self.config.channels_last else "as exported",
            "quantization": {
                "config": self.config.to_json(),
                "recipe": converted.recipe,
                "io": io_quantization(tflite),
                "buffers_moved_inline": len(moved),
            },
            "rewrites": [r.to_json() | self._rewrite_cost(r) for r in self.pass_results if r.changed],
            "tflm_ops": [{"op": o.name, "version": o.version, "count": o.count} for o in ops],
            "flash_bytes": len(tflite),
            "arena": arena.to_json(),
            "board_check": budget,
            "c_symbols": {"array": self.symbols.array, "length": self.symbols.length},
            "verification": verification,
            "accuracy_budget": budget_entry,
        }
        with timed("writing"), atomic_output_dir(out_dir) as staging:
            (staging / "model.tflite").write_bytes(tflite)
            (staging / "model_data.cc").write_text(model_data_cc(tflite, self.symbols, name))
            io_lines = io_comments(sections["quantization"]["io"], self.program.inputs, self.config.channels_last)
            (staging / "model_data.h").write_text(model_data_h(self.symbols, name, io_lines))
            (staging / "op_resolver.h").write_text(op_resolver_h([o.name for o in ops], name))
            files = [f for f in FILES if f != "manifest.json"]
            manifest = build_manifest("mcu", self.program, staging, files=files, tools=_TOOLS, **sections)
            manifest = write_build_manifest(staging, manifest)
        return McuArtifact(out_dir, manifest)

    def _quantized(self, config) -> tuple:
        """(converted, tflite, buffers moved inline, arena) of the integer model `config` gives,
        its ops checked against TFLite-Micro's."""
        from tpuedge.edge.mcu.arena_probe import measure_arena
        from tpuedge.edge.mcu.mcu_capability import check_converted_model
        from tpuedge.edge.litert.litert_runtime import ModelRunError
        from tpuedge.edge.mcu.mcu_runtimes import McuRuntimes
        from tpuedge.edge.mcu.mcu_verification import unpreparable_message
        from tpuedge.shared_ir.stage_times import timed

        with timed("quantization (after the float model)"):
            converted, tflite, moved = integer_tflite(
                self.rewritten, config, self.calibration, self.program.activation_ranges, self.board
            )
        check_converted_model(self.program.name, tflite)
        with timed("arena probe (TFLite-Micro)"):
            try:
                runtimes = McuRuntimes(tflite, config.channels_last)
            except ModelRunError as exc:
                raise UserError(unpreparable_message(self.program.name, tflite, exc)) from None
            with ThreadPoolExecutor(1, thread_name_prefix="tpuedge-arena-probe") as pool:
                probing = pool.submit(measure_arena, tflite, runtimes.quantized(self.calibration[0]))
                self._ahead_of_verification()  # while the probe's child runs
                arena = probing.result()
        return converted, tflite, moved, arena

    def _ahead_of_verification(self) -> None:
        """What the verification run needs that no arena size changes: the float IR's outputs on
        its samples (`Program.run` remembers them) and TFLite-Micro's runtime module imported."""
        import_module("tflite_micro")  # its runtime, which edge/mcu/tflm_runtime.py opens models with

        for _, samples, _, _ in self._verification_sets():
            for s in samples:
                self.program.run(*s)

    def _int16_over_the_board(self, converted, tflite: bytes, arena) -> bool:
        from tpuedge.edge.mcu.boards import fits

        upgraded = any(o.get("precision") == "int16" for o in converted.recipe.get("non_int8_ops", []))
        return upgraded and self.board is not None and not fits(self.board, len(tflite), arena.recommended_bytes)

    def _rewrite_cost(self, result) -> dict:
        """The accuracy a rewrite cost: the rewritten float IR vs the original, on the calibration samples."""
        from tpuedge.quantize.metrics import compare_outputs

        samples = self.calibration[:64]
        before = [self.program.run(*s) for s in samples]
        after = [self.rewritten.run(*s) for s in samples]
        cost = compare_outputs(before, after)
        return {"accuracy_cost_vs_original_float": cost.to_json(), "accuracy_cost_text": cost.describe()}

    def _check_budget(self, measured: tuple, recipe: dict) -> dict:
        """The budget on the samples accuracy is reported on (eval data, else held out from calibration)."""
        from tpuedge.quantize.fed_back_choices import fed_back_choices_explained
        from tpuedge.quantize.budget import enforce_budget
        from tpuedge.quantize.metrics import compare_outputs

        kind, floats, outputs, labels = measured
        with fed_back_choices_explained(self.rewritten.exported_program):
            return enforce_budget(
                self.budget,
                name=self.program.name,
                target="mcu",
                reference=floats,
                candidate=outputs,
                inputs=kind,
                labels=labels,
                recipe=recipe,
                summary=compare_outputs(floats, outputs),
                costliest=self._costliest_points,
            )

    def _costliest_points(self) -> list[dict]:
        """The IR points of the rewritten program ranked by their own int8 cost (for a build below
        its budget: where the error comes from); none when the JAX lowering can't run it or it has
        too many points to rank."""
        from tpuedge.quantize.sensitivity import RANKING_SAMPLES, TooManyPoints, rank_quant_points
        from tpuedge.shared_ir.targets import ir_evaluator

        try:
            ranking = rank_quant_points(
                self.rewritten, self.calibration, self.calibration[:RANKING_SAMPLES], evaluator=ir_evaluator()
            )
        except (UserError, InternalError, TooManyPoints):
            return []
        return [s.to_json() for s in ranking[:10]]

    def _verification_sets(self) -> list[tuple]:
        from tpuedge.edge.mcu.mcu_verification import verification_sets

        return verification_sets(self.evaluation, self.held_out, self.calibration)

    def _verify(self, runtime: "McuRuntimes") -> tuple[dict, tuple]:
        from tpuedge.edge.mcu.mcu_verification import verify_runs

        return verify_runs(self.program, runtime, self._verification_sets(), len(self.calibration), self.evaluation)
