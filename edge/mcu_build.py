"""The mcu build: `McuLowered` (checked, rewritten, calibrated) -> `compile` -> `McuArtifact`.

Everything is measured in memory first (conversion, TFLM run, arena, accuracy, budget); files
are written only when all of it passed, through `atomic_output_dir`. No timings in any file,
so the same inputs give byte-identical folders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuedge.shared_ir.errors import InternalError, Problem, ProblemsError, UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["McuLowered", "McuArtifact", "load_evaluation", "FILES"]

FILES = ("model.tflite", "model_data.cc", "model_data.h", "op_resolver.h", "manifest.json")
_MIN_CALIBRATION = 16
_AGREEMENT_LSB = 1  # TFLM and LiteRT run the same int8 kernels' math: expected within 1 LSB


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


# ---- evaluation data ------------------------------------------------------------------------
@dataclass(frozen=True)
class Evaluation:
    source: str
    samples: list[list[np.ndarray]]
    labels: np.ndarray | None


def _default_eval_spec(calibration: Any) -> str | None:
    """`evaluation` beside a `file.py:function` calibration spec, when that module defines one."""
    if not isinstance(calibration, str) or ":" not in calibration:
        return None
    where = calibration.rsplit(":", 1)[0]
    if not where.endswith(".py") or not Path(where).is_file():
        return None
    import re

    if not re.search(r"^def evaluation\(", Path(where).read_text(), re.MULTILINE):
        return None
    return f"{where}:evaluation"


def load_evaluation(spec: str, program: "Program") -> Evaluation:
    """`module:function` returning (inputs, labels) -> samples in the Program's input shapes."""
    from tpuedge.model_spec import load_factory
    from tpuedge.quantize.calibration import load_calibration

    fn = load_factory(spec)
    try:
        result = fn()
    except Exception as exc:
        raise UserError(f"The evaluation function {spec} raised {type(exc).__name__}: {exc}; fix it and retry.") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UserError(
            f"The evaluation function {spec} must return (inputs, labels): inputs an array with samples on the first "
            "axis (or a dict keyed by input name), labels one class index per sample."
        )
    inputs, labels = result
    samples = load_calibration(inputs, program, min_samples=1)
    labels = None if labels is None else np.asarray(labels).reshape(-1)
    if labels is not None and len(labels) != len(samples):
        raise UserError(f"{spec} returned {len(samples)} input samples but {len(labels)} labels; give one label per sample.")
    return Evaluation(spec, samples, labels)


def resolve_evaluation(spec: Any, program: "Program") -> "Evaluation | None":
    """--eval as given: None/'none', (inputs, labels) from Python, or `file.py:function`."""
    from tpuedge.quantize.calibration import load_calibration

    if isinstance(spec, tuple) and len(spec) == 2:  # (inputs, labels) from Python
        samples = load_calibration(spec[0], program, min_samples=1)
        labels = None if spec[1] is None else np.asarray(spec[1]).reshape(-1)
        if labels is not None and len(labels) != len(samples):
            raise UserError(f"--eval gave {len(samples)} input samples but {len(labels)} labels; give one label per sample.")
        return Evaluation("(inputs, labels) given in Python", samples, labels)
    if spec is None or str(spec).lower() == "none":
        return None
    return load_evaluation(str(spec), program)


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
        io_dtype: str = "int8",
        symbol: str | None = None,
        gelu: str = "sigmoid",
        per_channel: bool = True,
        channels_last: bool = True,
        min_cosine: float | None = None,
        min_top1: float | None = None,
        max_drop: float | None = None,
        allow_below_budget: bool = False,
    ):
        from tpuedge.edge.boards import resolve_board
        from tpuedge.edge.c_array import symbols_for
        from tpuedge.edge.mcu_capability import mcu_passes
        from tpuedge.quantize.budget import AccuracyBudget
        from tpuedge.quantize.calibration import load_calibration
        from tpuedge.quantize.config import QuantConfig
        from tpuedge.shared_ir.program import Program

        self.program = program
        # Cheap user errors first, before any conversion.
        self.board = resolve_board(board, flash_kb, ram_kb)
        self.symbols = symbols_for(program.name, symbol)
        self.config = QuantConfig(
            scheme="int8", io_dtype=io_dtype or "int8", strict_int8=True, per_channel=per_channel,
            channels_last=True if channels_last is None else bool(channels_last),
            min_calibration_samples=_MIN_CALIBRATION,
        )
        problems = program.check("mcu")
        if problems:
            raise ProblemsError(
                f"{program.name} has {len(problems)} problem(s) for TFLite-Micro (target mcu); nothing was written:",
                problems,
            )
        ep, self.pass_results = mcu_passes(gelu or "sigmoid").run(program.exported_program)
        self.rewritten = Program(ep, name=program.name) if any(r.changed for r in self.pass_results) else program
        if calibration is None:
            raise UserError(
                "The mcu target is always full int8 and needs calibration data to set activation ranges: pass "
                "--calibration data.npz (arrays keyed by input name, samples on the first axis), a .npy, a folder, "
                "or module:function returning input tuples (e.g. examples/digits/model.py:calibration)."
            )
        self.calibration = load_calibration(calibration, program, min_samples=_MIN_CALIBRATION)
        self.calibration_source = str(calibration) if isinstance(calibration, (str, Path)) else type(calibration).__name__
        eval_spec = eval if eval is not None else _default_eval_spec(calibration)
        self.evaluation = resolve_evaluation(eval_spec, program)
        self.budget = AccuracyBudget.from_options(
            min_cosine=min_cosine, min_top1=min_top1, max_drop=max_drop, allow_below_budget=allow_below_budget,
            has_labels=self.evaluation is not None and self.evaluation.labels is not None,
        )

    def as_text(self) -> str:
        lines = [f"mcu lowering of {self.program.name} (IR {self.program.fingerprint[:12]})"]
        lines += [f"  pass {r.name}: {r.description}" for r in self.pass_results]
        lines.append(f"  layout: {'NHWC image inputs' if self.config.channels_last else 'as exported (NCHW)'}")
        lines.append(f"  quantization: {self.config.to_json()}")
        lines.append(f"  calibration: {len(self.calibration)} samples from {self.calibration_source}")
        if self.evaluation:
            lines.append(f"  evaluation: {len(self.evaluation.samples)} samples from {self.evaluation.source}")
        lines.append(f"  board: {self.board.name if self.board else 'none (reports the built-in boards it fits)'}")
        return "\n".join(lines)

    # ---- the build ----------------------------------------------------------------------
    def compile(self, out_dir: Any = None) -> "McuArtifact":
        from tpuedge.edge.arena import measure_arena
        from tpuedge.edge.boards import budget_check
        from tpuedge.edge.c_array import model_data_cc, model_data_h
        from tpuedge.edge.convert import program_to_tflite
        from tpuedge.edge.op_resolver import op_resolver_h
        from tpuedge.edge.tflm_model import external_buffers, inline_buffers, io_quantization, ops_used
        from tpuedge.shared_ir.artifact import file_entry, tool_versions, write_manifest
        from tpuedge.shared_ir.atomic import atomic_output_dir

        name = self.program.name
        out_dir = Path(out_dir) if out_dir is not None else Path("build") / name / "mcu"
        converted = program_to_tflite(self.rewritten, self.config, self.calibration)
        moved = external_buffers(converted.tflite)
        tflite = inline_buffers(converted.tflite)
        if external_buffers(tflite):
            raise InternalError(f"{name}: buffers {external_buffers(tflite)} are still outside the flatbuffer after inlining")
        ops = ops_used(tflite)
        self._check_tflm_ops(ops)
        self._check_integer_only(tflite)

        runtime = _Runtimes(tflite, self.config.channels_last)
        arena = measure_arena(tflite, runtime.quantized(self.calibration[0]))
        runtime.open_tflm(arena.recommended_bytes)
        verification, measured = self._verify(runtime)
        budget_entry = self._check_budget(measured, converted.recipe)  # BudgetError (exit 1) before anything is written
        budget = budget_check(self.board, len(tflite), arena.recommended_bytes)

        manifest = {
            "target": "mcu",
            "model_name": name,
            "ir_fingerprint": self.program.fingerprint,
            "inputs": [_layout_spec(s, self.config.channels_last) for s in self.program.inputs],
            "layout": "NHWC" if self.config.channels_last else "as exported",
            "outputs": [s.to_json() for s in self.program.outputs],
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
            "tool_versions": tool_versions("litert-torch", "ai-edge-litert", "ai-edge-quantizer", "tflite-micro"),
        }
        with atomic_output_dir(out_dir) as staging:
            (staging / "model.tflite").write_bytes(tflite)
            (staging / "model_data.cc").write_text(model_data_cc(tflite, self.symbols, name))
            (staging / "model_data.h").write_text(model_data_h(self.symbols, name))
            (staging / "op_resolver.h").write_text(op_resolver_h([o.name for o in ops], name))
            manifest["files"] = {f: file_entry(staging / f) for f in FILES if f != "manifest.json"}
            write_manifest(staging, manifest)
        return McuArtifact(out_dir, manifest)

    def _check_tflm_ops(self, ops) -> None:
        from tpuedge.edge.mcu_capability import unsupported_builtins
        from tpuedge.edge.tflm_ops import tflm_missing

        lacking = unsupported_builtins(o.name for o in ops)
        if lacking:
            missing = tflm_missing()
            counts = {o.name: o.count for o in ops}
            raise ProblemsError(
                f"{self.program.name} converted to TFLite ops that TFLite-Micro has no kernel for; nothing was written:",
                [
                    Problem("op", n, "TFLite-Micro has no kernel for this op", missing.get(n, ""), counts[n])
                    for n in lacking
                ],
            )

    def _check_integer_only(self, tflite: bytes) -> None:
        """Full int8 means no float compute: float tensors may only be model I/O (float32 I/O)."""
        from tpuedge.edge import tflite_file

        sg = tflite_file.read_model(tflite).subgraphs[0]
        io = {int(i) for i in sg.inputs} | {int(i) for i in sg.outputs}
        floats = [
            tflite_file.text(t.name)
            for i, t in enumerate(sg.tensors)
            if i not in io and tflite_file.dtype_name(t.type) in ("float32", "float16")
        ]
        if floats:
            raise InternalError(
                f"strict int8 conversion left {len(floats)} float tensor(s) (e.g. {floats[:3]}); TFLite-Micro needs a "
                "fully integer graph"
            )

    def _rewrite_cost(self, result) -> dict:
        """The accuracy a rewrite cost: the rewritten float IR vs the original, on the calibration samples."""
        from tpuedge.quantize.metrics import compare_outputs

        samples = self.calibration[:64]
        before = [self.program.run(*s) for s in samples]
        after = [self.rewritten.run(*s) for s in samples]
        cost = compare_outputs(before, after)
        return {"accuracy_cost_vs_original_float": cost.to_json(), "accuracy_cost_text": cost.describe()}

    def _check_budget(self, measured: dict, recipe: dict) -> dict:
        """The budget on the set accuracy is reported on (the last one _verify measured: eval data when given)."""
        from tpuedge.quantize.budget import enforce_budget
        from tpuedge.quantize.metrics import compare_outputs

        kind, floats, outputs, labels = measured
        return enforce_budget(
            self.budget, name=self.program.name, target="mcu", reference=floats, candidate=outputs, inputs=kind,
            labels=labels, recipe=recipe, summary=compare_outputs(floats, outputs),
        )

    def _verify(self, runtime: "_Runtimes") -> tuple[dict, tuple]:
        """TFLM vs LiteRT (LSB) and vs the float Program, on calibration and evaluation samples."""
        from tpuedge.quantize.metrics import compare_outputs, stack_samples, task_accuracy

        report: dict = {}
        sets = [("calibration", self.calibration[:200], None)]
        if self.evaluation is not None:
            sets.append(("evaluation", self.evaluation.samples, self.evaluation.labels))
        for label, samples, labels in sets:
            tflm_raw, litert_raw, floats = [], [], []
            for s in samples:
                q = runtime.quantized(s)
                tflm_raw.append(runtime.tflm.run_raw(q))
                litert_raw.append(runtime.litert.run_raw(q))
                floats.append(self.program.run(*s))
            lsb = max(
                int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max()) if a.size else 0
                for ta, tb in zip(tflm_raw, litert_raw)
                for a, b in zip(ta, tb)
            )
            tflm_float = [runtime.dequantized(o) for o in tflm_raw]
            entry = {
                "samples": len(samples),
                "tflm_vs_litert_max_lsb": lsb,
                "tflm_vs_litert_within_1_lsb": lsb <= _AGREEMENT_LSB,
                "tflm_vs_float": compare_outputs(floats, tflm_float).to_json(),
            }
            float_acc = None if labels is None else task_accuracy(stack_samples([f[0] for f in floats]), labels)
            if float_acc is not None:  # the one definition verify uses (quantize.metrics)
                entry["float_accuracy"] = _r(float_acc)
                entry["tflm_accuracy"] = _r(task_accuracy(stack_samples([t[0] for t in tflm_float]), labels))
                entry["source"] = self.evaluation.source if self.evaluation else None
            report[label] = entry
            measured = (f"{label} samples", floats, tflm_float, labels)
        return report, measured


class _Runtimes:
    """The same model bytes in TFLM and LiteRT, with the model's own I/O (de)quantization."""

    def __init__(self, tflite: bytes, channels_last: bool):
        from tpuedge.edge.litert_runtime import LiteRTRunner

        self.tflite = tflite
        self.channels_last = channels_last
        self.litert = LiteRTRunner(tflite)
        self.tflm = None

    def open_tflm(self, arena_bytes: int) -> None:
        from tpuedge.edge.tflm_runtime import TflmRunner

        self.tflm = TflmRunner(self.tflite, arena_bytes)

    def _details(self, which: str) -> list[dict]:
        from tpuedge.edge.tflm_model import io_quantization

        if not hasattr(self, "_io"):
            self._io = io_quantization(self.tflite)
        return self._io[which]

    def quantized(self, sample: Sequence[np.ndarray]) -> list[np.ndarray]:
        """A Program-layout (NCHW) sample as the model's input tensors (NHWC when channels-last)."""
        from tpuedge.edge.convert import tflite_layout_inputs
        from tpuedge.quantize import affine

        out = []
        for x, d in zip(tflite_layout_inputs([np.asarray(a) for a in sample], self.channels_last), self._details("inputs")):
            x = np.asarray(x).reshape(d["shape"])
            if d["scale"] is None or d["dtype"] not in ("int8", "int16"):
                out.append(x.astype(d["dtype"]))
                continue
            out.append(affine.quantize(x, d["scale"], d["zero_point"], d["dtype"], ties="away"))  # as TFLM rounds
        return out

    def dequantized(self, outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        from tpuedge.quantize import affine

        res = []
        for y, d in zip(outputs, self._details("outputs")):
            if d["scale"] is None or d["dtype"] not in ("int8", "int16"):
                res.append(np.asarray(y, np.float32))
            else:
                res.append(affine.dequantize(y, d["scale"], d["zero_point"]))
        return res


def _layout_spec(spec, channels_last: bool) -> dict:
    """The artifact's input as it takes it: rank-4 float inputs NHWC when channels-last."""
    from tpuedge.edge.channels_last import nhwc_shape

    entry = spec.to_json()
    if channels_last and len(spec.shape) == 4 and spec.dtype.startswith("float"):
        entry["shape"] = list(nhwc_shape(entry["shape"]))
    return entry


# ---- the artifact ---------------------------------------------------------------------------
class McuArtifact:
    """A built mcu folder; `run` executes model.tflite in the TFLite-Micro interpreter."""

    def __init__(self, directory: Path, manifest: dict):
        from tpuedge.shared_ir.artifact import Artifact

        self._base = Artifact(directory, manifest)
        self.directory = Path(directory)
        self.manifest = manifest
        self._runner = None

    @classmethod
    def open(cls, path: Path) -> "McuArtifact":
        from tpuedge.shared_ir.artifact import read_manifest

        return cls(path, read_manifest(path))

    target = property(lambda self: self._base.target)
    fingerprint = property(lambda self: self._base.fingerprint)
    inputs = property(lambda self: self._base.inputs)
    outputs = property(lambda self: self._base.outputs)

    @property
    def tflite_path(self) -> Path:
        return self.directory / "model.tflite"

    @property
    def arena_bytes(self) -> int:
        return int(self.manifest["arena"]["measured_bytes"])

    @property
    def recommended_arena_bytes(self) -> int:
        return int(self.manifest["arena"]["recommended_bytes"])

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """Float in, float out, in TFLite-Micro (int8 I/O quantized with the tensors' parameters)."""
        from tpuedge.edge.tflm_runtime import TflmRunner
        from tpuedge.shared_ir.tensors import validate_inputs

        arrays = validate_inputs(self.inputs, inputs, f"mcu artifact {self.directory}")
        if self._runner is None:
            self._runner = TflmRunner(self.tflite_path.read_bytes(), self.recommended_arena_bytes, source=self.tflite_path)
        return self._runner.run(arrays)

    def report(self) -> str:
        m = self.manifest
        lines = [f"mcu build of {m['model_name']} (IR {m['ir_fingerprint'][:12]}) -> {self.directory}"]
        for r in m.get("rewrites", []):
            lines.append(f"  rewrite: {r['description']}; cost vs original float: {r['accuracy_cost_text']}")
        ops = ", ".join(f"{o['op']}x{o['count']}" for o in m["tflm_ops"])
        lines.append(f"  TFLite-Micro ops ({len(m['tflm_ops'])}): {ops}")
        io = m["quantization"]["io"]
        lines.append(
            "  I/O: "
            + ", ".join(f"{t['name']} {t['dtype']}{t['shape']}" for t in io["inputs"] + io["outputs"])
            + " (full int8, every buffer inside the flatbuffer)"
        )
        arena = m["arena"]
        lines.append(f"  flash: {m['flash_bytes']:,} bytes (model array)")
        lines.append(
            f"  arena: {arena['measured_bytes']:,} bytes measured (TFLM bisection to {arena['bisection_step_bytes']} B), "
            f"recommended {arena['recommended_bytes']:,} ({arena['margin']})"
        )
        for label, v in m["verification"].items():
            text = (
                f"  {label} ({v['samples']} samples): TFLM vs LiteRT max {v['tflm_vs_litert_max_lsb']} LSB"
                f"{'' if v['tflm_vs_litert_within_1_lsb'] else ' (above the 1 LSB expected: the two runtimes round some int8 kernels differently)'}; "
                f"TFLM vs float: cosine {v['tflm_vs_float']['cosine']:.4f}, top-1 agreement "
                f"{'n/a' if v['tflm_vs_float']['top1_agreement'] is None else format(100 * v['tflm_vs_float']['top1_agreement'], '.1f') + '%'}"
            )
            lines.append(text)
            if "tflm_accuracy" in v:
                lines.append(
                    f"  TFLM accuracy: {100 * v['tflm_accuracy']:.2f}% (float {100 * v['float_accuracy']:.2f}%) "
                    f"on {v['samples']} samples of {v['source']}"
                )
        b = m["board_check"]
        if b.get("board"):
            lines.append(
                f"  board {b['board']['name']}: fits (flash {m['flash_bytes']:,}/{b['flash_budget_bytes']:,}, "
                f"RAM {b['arena_ram_bytes']:,}/{b['ram_budget_bytes']:,} bytes, {b['reserve_for_application']} reserved)"
            )
        lines.append(f"  fits built-in boards: {', '.join(b['fits_builtin_boards']) or 'none'}")
        from tpuedge.quantize.budget import describe_budget

        budget = describe_budget(m.get("accuracy_budget"))
        if budget:
            lines.append(budget)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"McuArtifact({str(self.directory)!r})"
