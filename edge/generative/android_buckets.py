"""android for a bucket bundle: one .tflite with a signature per size of the variable axis.

    export_buckets(encoder, (ids, mask), "input_ids:1=16,32,64").lower("android", quantize="auto").compile(out)

The entries are lowered together (each weight stored once), quantized without calibration
(fp16 or dynamic-int8 weights, ai-edge-quantizer's recipes as for a single model), and every
bucket is run in LiteRT against its entry in torch under the cosine budget. `auto` keeps the
smallest scheme that meets it in every bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["AndroidBucketsLowered", "BUCKET_SCHEMES"]

BUCKET_SCHEMES = ("dynamic-int8", "fp16", "none")  # smallest first: what auto tries, in order
SAMPLES = 4
MODEL_FILE = "model.tflite"
TOOLS = ("litert-torch", "litert-converter", "ai-edge-litert", "ai-edge-quantizer")


@dataclass
class AndroidBucketsLowered:
    bundle: Any
    scheme: str
    budget: Any

    @classmethod
    def create(
        cls,
        bundle,
        /,
        *,
        quantize: str | None = None,
        min_cosine: float | None = None,
        min_top1: float | None = None,
        allow_below_budget: bool = False,
        per_channel: bool = True,
        eval: Any = None,  # noqa: A002
        **unknown: Any,
    ) -> "AndroidBucketsLowered":
        from tpuedge.quantize.budget import AccuracyBudget
        from tpuedge.shared_ir.errors import ProblemsError

        if unknown:
            raise UserError(f"android builds in buckets take no option(s) {', '.join(sorted(unknown))}.")
        scheme = quantize or "auto"
        if scheme not in (*BUCKET_SCHEMES, "auto"):
            raise UserError(
                f"--quantize {scheme} is not offered for a model built in buckets; choose one of "
                f"{', '.join((*BUCKET_SCHEMES, 'auto'))} (they need no calibration data)."
            )
        if eval is not None:
            raise UserError(
                "--eval is not read by a build in buckets yet: it measures each bucket on generated inputs; drop --eval."
            )
        problems = bundle.check("android")
        if problems:
            raise ProblemsError(
                f"{bundle.name} has {len(problems)} problem(s) for android; nothing was written:", problems
            )
        budget = AccuracyBudget.from_options(
            min_cosine=min_cosine, min_top1=min_top1, allow_below_budget=allow_below_budget
        )
        return cls(bundle, scheme, budget)

    def as_text(self) -> str:
        b = self.bundle.buckets
        return f"# android buckets: {self.bundle.name}, {b['input']} axis {b['axis']} sizes {b['sizes']}, scheme {self.scheme}\n"

    def compile(self, out_dir: Any = None):
        from tpuedge.edge.generative.bucket_artifact import LiteRTBucketsArtifact
        from tpuedge.edge.generative.bundle_tflite import float_bundle_tflite
        from tpuedge.edge.litert.quantizer_recipes import quantizer_recipe
        from tpuedge.edge.litert.quantizer_runner import run_quantizer
        from tpuedge.quantize.budget import check_budget
        from tpuedge.quantize.budget_report import budget_error
        from tpuedge.quantize.config import QuantConfig
        from tpuedge.shared_ir.atomic import atomic_output_dir
        from tpuedge.shared_ir.manifest import write_build_manifest
        from tpuedge.shared_ir.stage_times import timed

        bundle = self.bundle
        out = Path(out_dir) if out_dir is not None else Path("build") / bundle.name / "android"
        with timed("litert-torch lowering (every entry point)"):
            float_tflite = float_bundle_tflite(bundle)
        samples = {entry: p.example_inputs(seed=0, count=SAMPLES) for entry, p in bundle.entries.items()}
        with timed("float reference (the IR run in torch)"):
            reference = {entry: [bundle.entries[entry].run(*s) for s in inputs] for entry, inputs in samples.items()}
        quantizer = run_quantizer(float_tflite)
        tried = []
        for scheme in BUCKET_SCHEMES if self.scheme == "auto" else (self.scheme,):
            with timed("quantization (bucket scheme)"):
                data = float_tflite if scheme == "none" else quantizer(quantizer_recipe(QuantConfig(scheme=scheme)))
            results = {
                entry: check_budget(
                    self.budget,
                    reference[entry],
                    _run_entry(data, entry, inputs),
                    inputs=f"{SAMPLES} generated inputs (a smoke check: no evaluation data)",
                )
                for entry, inputs in samples.items()
            }
            tried.append(
                {
                    "scheme": scheme,
                    "bytes": len(data),
                    "passed": all(r.passed for r in results.values()),
                    "cosine_by_entry": {e: [round(c, 6) for c in r.sample_cosine] for e, r in results.items()},
                }
            )
            if all(r.passed for r in results.values()):
                break
        failed = [(entry, r) for entry, r in results.items() if not r.passed]
        if failed and not self.budget.allow_below:
            entry, result = failed[0]
            summary = _summary(reference[entry], _run_entry(data, entry, samples[entry]))
            raise budget_error(f"{bundle.name} ({entry})", "android", result, {"scheme": scheme}, summary)
        with timed("writing"), atomic_output_dir(out) as stage:
            (stage / MODEL_FILE).write_bytes(data)
            manifest = _manifest(bundle, stage, scheme, tried, results, float_tflite, data)
            manifest = write_build_manifest(stage, manifest)
        return LiteRTBucketsArtifact(out, manifest)


def _run_entry(data: bytes, entry: str, inputs: list) -> list[list]:
    from tpuedge.edge.tool_output import held_tool_output

    from ai_edge_litert.interpreter import Interpreter

    with held_tool_output("LiteRT"):
        interpreter = Interpreter(model_content=data, num_threads=1)
        runner = interpreter.get_signature_runner(entry)
        names = list(runner.get_input_details())
        outputs = []
        for sample in inputs:
            ordered = _by_name(runner, sample)
            got = runner(**{k: ordered[k] for k in names})
            outputs.append([got[k] for k in runner.get_output_details()])
    return outputs


def _by_name(runner, sample: list) -> dict:
    """The sample's arrays keyed by the signature's input names, in the entry's input order."""
    details = runner.get_input_details()
    order = sorted(details, key=lambda k: details[k]["index"])
    return {name: value.astype(details[name]["dtype"]) for name, value in zip(order, sample)}


def _summary(reference, candidate):
    from tpuedge.quantize.metrics import compare_outputs

    return compare_outputs(reference, candidate)


def _manifest(bundle, stage: Path, scheme: str, tried: list, results: dict, float_tflite: bytes, data: bytes) -> dict:
    from tpuedge.shared_ir.artifact import file_entry, tool_versions

    first = next(iter(bundle.entries.values()))
    return {
        "target": "android",
        "model_name": bundle.name,
        "ir_fingerprint": bundle.fingerprint,
        "inputs": [s.to_json() for s in first.inputs],
        "outputs": [s.to_json() for s in first.outputs],
        "buckets": {
            **bundle.buckets,
            "entries": {
                e: {"inputs": [s.to_json() for s in p.inputs], "outputs": [s.to_json() for s in p.outputs]}
                for e, p in bundle.entries.items()
            },
        },
        "files": {MODEL_FILE: file_entry(stage / MODEL_FILE)},
        "tool_versions": tool_versions(*TOOLS),
        "recipe": {"scheme": scheme, "tried": tried},
        "accuracy_budget": {entry: r.to_json(written_below=not r.passed) for entry, r in results.items()},
        "sizes": {
            "tflite_bytes": len(data),
            "float_tflite_bytes": len(float_tflite),
            "parameter_count": bundle.parameter_count,
        },
    }
