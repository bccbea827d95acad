"""A single-entry program planned for android, and its build (no litert import at module level).

    program.lower("android", quantize="int8", calibration="cal.npz").compile("build/android")

lower() checks the program and loads the calibration data (every problem before any output);
compile() converts through litert-torch + ai-edge-quantizer, runs the result in the LiteRT
interpreter against the float IR, and writes model.tflite + manifest.json atomically.
--quantize auto (the default) builds each candidate scheme and keeps the smallest, then fastest,
that meets the accuracy budget (edge/android/android_auto.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["AndroidLowered", "ACCURACY_SAMPLES", "GENERATED_SAMPLES", "TOOLS"]

# At most this many samples measure the post-build accuracy (see quantize/accuracy_samples.py).
ACCURACY_SAMPLES = 64
GENERATED_SAMPLES = 8
TOOLS = ("litert-torch", "litert-converter", "ai-edge-litert", "ai-edge-quantizer")


def _integer_request(config) -> str:
    """What asked for static int8, in the user's flags."""
    if config.scheme == "int8":
        return "--quantize int8"
    flags = [
        f
        for f, on in (
            ("--strict-int8", config.strict_int8),
            (f"--io-dtype {config.io_dtype}", config.io_dtype != "float32"),
        )
        if on
    ]
    return f"{' / '.join(flags)} (only static int8 gives it, so --quantize auto tries only that)"


class AndroidLowered:
    """A program planned for android: config + validated calibration; `compile()` builds it."""

    def __init__(
        self,
        program: "Program",
        config,
        calibration,
        calibration_source: str | None,
        held_out=None,
        evaluation=None,
        budget=None,
    ):
        from tpuedge.quantize.budget import AccuracyBudget

        self.program = program
        self.config = config
        self.calibration = calibration
        self.calibration_source = calibration_source
        self.held_out = list(held_out or [])
        self.budget = budget or AccuracyBudget()
        self.evaluation = evaluation

    @classmethod
    def create(
        cls,
        program: "Program",
        *,
        quantize: str | None = None,
        calibration: Any = None,
        strict_int8: bool = False,
        io_dtype: str = "float32",
        channels_last: bool = False,
        per_channel: bool = True,
        eval: Any = None,  # noqa: A002 - the CLI flag's name
        min_cosine: float | None = None,
        min_top1: float | None = None,
        max_drop: float | None = None,
        allow_below_budget: bool = False,
        budget_outputs: str | None = None,
        rollout: str | None = None,
        **unknown: Any,
    ) -> "AndroidLowered":
        from tpuedge.quantize.budget import AccuracyBudget
        from tpuedge.quantize.calibration import load_calibration
        from tpuedge.quantize.config import DEFAULT_SCHEME, QuantConfig
        from tpuedge.shared_ir.errors import ProblemsError, UserError

        if unknown:
            raise UserError(f"android takes no option(s) {', '.join(sorted(unknown))}; see `tpuedge build --help`.")
        config = QuantConfig(
            scheme=quantize or DEFAULT_SCHEME,
            io_dtype=io_dtype or "float32",
            strict_int8=bool(strict_int8),
            channels_last=bool(channels_last),
            per_channel=True if per_channel is None else bool(per_channel),
        )
        problems = program.check("android")
        if problems:
            raise ProblemsError(
                f"{program.name} has {len(problems)} problem(s) for android; nothing was written:", problems
            )
        from tpuedge.edge.mcu_evaluation import evaluation_from

        evaluation = evaluation_from(eval, program)
        samples = None
        trained = program.activation_ranges is not None and config.scheme == "int8" and calibration is None
        if trained:  # every range from training; the --eval inputs only fill the build's checks
            from tpuedge.edge.litert.trained_ranges import trained_range_samples

            samples = trained_range_samples(program, evaluation, "android")
        elif calibration is not None:
            samples = load_calibration(
                calibration, program, min_samples=config.min_calibration_samples if config.uses_calibration else 1
            )
        elif config.needs_calibration:
            raise UserError(
                f"{_integer_request(config)} needs calibration data to set activation ranges for {program.name}; pass "
                "--calibration data.npz (arrays keyed by input name, first axis = samples), a .npy, a folder of "
                "those, or module:function returning input tuples."
            )
        budget = AccuracyBudget.from_options(
            min_cosine=min_cosine,
            min_top1=min_top1,
            max_drop=max_drop,
            allow_below_budget=allow_below_budget,
            has_labels=evaluation is not None and evaluation.labels is not None,
            program=program,
            budget_outputs=budget_outputs,
            rollout=rollout,
            eval_samples=None if evaluation is None else len(evaluation.samples),
        )
        # the int8 search aims at the budget's top-1 agreement too, where it can read it
        config = config.replace(target_top1=budget.search_top1(program))
        if rollout is not None and config.io_dtype != "float32":
            raise UserError(
                f"--rollout feeds float states back; --io-dtype {config.io_dtype} gives integer ones: drop one of them."
            )
        held_out = []
        if samples and config.reads_calibration and evaluation is None:  # nothing read off the accuracy samples
            from tpuedge.quantize.accuracy_samples import split_calibration

            samples, held_out = split_calibration(samples, config.min_calibration_samples)
        source = calibration if isinstance(calibration, (str, Path)) else (None if calibration is None else "in-memory")
        if trained:
            from tpuedge.edge.litert.trained_ranges import TRAINED_RANGES_SOURCE as source
        return cls(program, config, samples, None if source is None else str(source), held_out, evaluation, budget)

    def as_text(self) -> str:
        """The graph litert-torch converts (after its decomposition table), with the plan."""
        from tpuedge.edge.litert.litert_lowering import decompose_for_litert

        ep = decompose_for_litert(self.program.exported_program)
        head = (
            f"# android: {self.program.name} (IR {self.program.fingerprint[:16]}), "
            f"quantize={self.config.scheme} io={self.config.io_dtype} strict_int8={self.config.strict_int8} "
            f"channels_last={self.config.channels_last} calibration="
            f"{len(self.calibration) if self.calibration else 0} sample(s)\n"
        )
        return head + ep.graph_module.print_readable(print_output=False)

    @property
    def uses_trained_ranges(self) -> bool:
        from tpuedge.edge.litert.trained_ranges import TRAINED_RANGES_SOURCE

        return self.calibration_source == TRAINED_RANGES_SOURCE

    def _accuracy_samples(self):
        """(the samples the build measures on, their labels or None): see quantize/accuracy_samples.py."""
        from tpuedge.quantize import accuracy_samples as acc

        if self.evaluation is not None:
            count = None if self.budget.rollout else ACCURACY_SAMPLES  # a rollout reads every whole sequence
            labels = None if self.evaluation.labels is None else self.evaluation.labels[:count]
            return acc.AccuracySamples(self.evaluation.samples[:count], acc.EVAL, 0), labels
        if self.held_out:
            return acc.AccuracySamples(self.held_out[:ACCURACY_SAMPLES], acc.HELD_OUT, 0), None
        if self.calibration and not self.config.needs_calibration:  # auto may calibrate on them: named so
            kind = acc.CALIBRATION if self.config.uses_calibration else acc.UNCALIBRATED
            return acc.AccuracySamples(self.calibration[:ACCURACY_SAMPLES], kind, 0), None
        if self.calibration:
            return acc.AccuracySamples(self.calibration[:ACCURACY_SAMPLES], acc.CALIBRATION, 0), None
        samples = self.program.example_inputs(seed=0, count=GENERATED_SAMPLES)
        return acc.AccuracySamples(samples, acc.RANDOM, 0), None

    def compile(self, out_dir: Any = None):
        from tpuedge.edge.android.artifact import MODEL_FILE, LiteRTArtifact
        from tpuedge.edge.litert.litert_runtime import (
            LiteRTRunner,
            ModelRunError,
            refused_by_litert,
            refused_on_budget_samples,
        )
        from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
        from tpuedge.edge.litert.litert_rollout import litert_rollout
        from tpuedge.quantize.fed_back_choices import fed_back_choices_explained
        from tpuedge.quantize.rollout import budget_inputs, rollout_or_samples
        from tpuedge.quantize.budget import enforce_budget
        from tpuedge.quantize.metrics import compare_outputs
        from tpuedge.shared_ir.atomic import atomic_output_dir
        from tpuedge.shared_ir.manifest import build_manifest, write_build_manifest
        from tpuedge.shared_ir.stage_times import timed

        program, config = self.program, self.config
        out = Path(out_dir) if out_dir is not None else Path("build") / program.name / "android"
        chosen, labels = self._accuracy_samples()
        samples = chosen.samples
        search_samples = self.calibration
        if not config.uses_calibration and not self.held_out and self.evaluation is None:
            search_samples = None  # too few to hold any out: the budget reads them, so no search may
        reference = None
        if config.scheme == "auto" or (config.reads_calibration and search_samples is not None):
            # before the conversion reads samples (auto: every candidate is measured against it):
            # a sample the IR itself refuses (a token id past the vocabulary) stops the build here,
            # with its inputs named, not in a tool's calibration run
            with timed("float reference (the IR run in torch)"):
                reference = rollout_or_samples(program.run, samples, self.budget.rollout)
        if config.scheme == "auto":
            from tpuedge.edge.android.android_auto import build_auto

            converted, auto_entry, budget, outputs = build_auto(
                program, config, self.calibration, chosen, reference, labels, self.budget, target="android"
            )
            converted = dataclasses.replace(converted, recipe={**converted.recipe, "auto": auto_entry})
            runner = LiteRTRunner(converted.tflite)
            accuracy = compare_outputs(reference, outputs)
        else:
            from tpuedge.edge.android.android_convert import convert_for_android
            from tpuedge.edge.android.verification_runs import verification_runs

            trained = program.activation_ranges if self.uses_trained_ranges else None
            with timed("quantization (after the float model)"):
                converted = convert_for_android(
                    program,
                    config,
                    search_samples,
                    report_strict_cost=trained is None,
                    trained_ranges=trained,
                    budget_cosine=self.budget.min_cosine,
                )
            try:
                with timed("verification run (LiteRT, float reference beside it)"):
                    if self.budget.rollout is None:
                        runner, reference, outputs = verification_runs(
                            program, converted.tflite, samples, config.channels_last, reference
                        )
                    else:
                        runner, reference, outputs = litert_rollout(
                            program, converted.tflite, samples, config.channels_last, self.budget.rollout
                        )
            except ModelRunError as exc:  # runs on the search's samples, a kernel refuses these
                if config.scheme != "int8":  # float activations: an op LiteRT can't run, no value it refused
                    raise refused_by_litert(program.name, f"android {config.scheme}", exc) from None
                raise refused_on_budget_samples(
                    program.name,
                    f"android {config.scheme}",
                    chosen.kind,
                    exc,
                    "Try --quantize auto or dynamic-int8, or calibration data that covers those inputs.",
                ) from None
            accuracy = compare_outputs(reference, outputs)
            with fed_back_choices_explained(program.exported_program):
                budget = enforce_budget(  # raises BudgetError (exit 1) before anything is written
                    self.budget,
                    name=program.name,
                    target="android",
                    reference=reference,
                    candidate=outputs,
                    inputs=budget_inputs(chosen.kind, self.budget.rollout, len(samples)),
                    labels=labels,
                    recipe=converted.recipe,
                    summary=accuracy,
                )
        if converted.config.needs_calibration and not self.uses_trained_ranges:
            chosen = chosen.with_calibration_used(len(self.calibration or []))
        summary = summarize_tflite(converted.tflite)
        float_bytes = len(converted.float_tflite)  # short-named as the model is (edge/litert/float_model.py)

        def spec(program_spec, info) -> dict:
            float_io = program_spec.dtype.startswith("float")
            return {
                "name": program_spec.name,
                "shape": list(info.shape),
                "dtype": program_spec.dtype if float_io else info.dtype,
            }

        sections = {
            "parameter_count": program.parameter_count,
            "inputs": [spec(s, t) for s, t in zip(program.inputs, runner.inputs)],
            "outputs": [spec(s, t) for s, t in zip(program.outputs, runner.outputs)],
            "layout": "NHWC" if config.channels_last else "as exported",
            "tflite_io": {
                "inputs": [t.to_json() for t in runner.inputs],
                "outputs": [t.to_json() for t in runner.outputs],
            },
            "recipe": converted.recipe,
            "calibration": {
                "source": self.calibration_source,
                "samples": len(self.calibration or []),
                "held_out_for_accuracy": len(self.held_out),
            },
            "sizes": {
                "tflite_bytes": len(converted.tflite),
                "float_tflite_bytes": float_bytes,
                "ratio_vs_float": round(len(converted.tflite) / float_bytes, 4),
                "weight_bytes": summary.weight_bytes,
                "graph_bytes": summary.graph_bytes,
                "external_buffers": summary.external_buffers,
            },
            "op_histogram": summary.op_histogram,
            "float_ops": summary.float_ops if converted.config.scheme == "int8" else {},
            "accuracy": {**accuracy.to_json(), **chosen.to_json(), "runtime": "ai_edge_litert Interpreter, 1 thread"},
            "accuracy_budget": budget,
        }
        with timed("writing"), atomic_output_dir(out) as stage:
            (stage / MODEL_FILE).write_bytes(converted.tflite)
            manifest = build_manifest("android", program, stage, files=[MODEL_FILE], tools=TOOLS, **sections)
            manifest = write_build_manifest(stage, manifest)
        return LiteRTArtifact(out, manifest)
