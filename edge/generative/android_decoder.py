"""android for a decoder bundle: one .tflite with a signature per entry point, each weight once.

    bundle.lower("android", quantize="auto").compile("build/lm/android")

compile() lowers the bundle's entries together (a float model, kept in the build cache),
quantizes it per the LM scheme (or, for `auto`, each candidate smallest first, keeping the first
that meets the LM budget), measures token agreement and perplexity against the float IR in
torch on text the choice did not read, and writes model.tflite, the tokenizer and
manifest.json atomically (and a .litertlm with `--bundle litertlm`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["AndroidDecoderLowered", "EVAL_POSITIONS", "SEARCH_POSITIONS"]

EVAL_POSITIONS = 256  # held-out next-token predictions the budget reads
SEARCH_POSITIONS = 128  # predictions `auto` reads to rank candidates (the other half of the text)
EVAL_SEQUENCE = 128  # tokens per evaluation sequence (shorter where the cache is)
GREEDY_PROMPTS = 3
GREEDY_TOKENS = 16
TOOLS = ("litert-torch", "litert-converter", "ai-edge-litert", "ai-edge-quantizer")
BUNDLES = ("none", "litertlm")


class AndroidDecoderLowered:
    def __init__(self, bundle, scheme, budget, eval_file, bundle_format: str):
        self.bundle, self.scheme, self.budget, self.eval_file, self.bundle_format = (
            bundle,
            scheme,
            budget,
            eval_file,
            bundle_format,
        )

    @classmethod
    def create(
        cls,
        lm,
        /,
        *,
        quantize: str | None = None,
        embedding_bits: int | None = None,
        eval: Any = None,  # noqa: A002
        min_top1: float | None = None,
        max_perplexity_increase: float | None = None,
        allow_below_budget: bool = False,
        bundle: str | None = None,
        **unknown: Any,
    ) -> "AndroidDecoderLowered":
        from tpuedge.quantize.lm_budget import LMBudget
        from tpuedge.quantize.lm_schemes import lm_scheme
        from tpuedge.shared_ir.errors import ProblemsError

        if unknown:
            raise UserError(
                f"android builds of a language model take no option(s) {', '.join(sorted(unknown))}; "
                "see `tpuedge build --help`."
            )
        scheme = lm_scheme(quantize, embedding_bits=embedding_bits)
        if bundle not in (None, *BUNDLES):
            raise UserError(f"--bundle takes {' or '.join(BUNDLES)}, got {bundle!r}.")
        if bundle == "litertlm" and lm.tokenizer is None:
            raise UserError(
                f"--bundle litertlm needs the model's tokenizer, and {lm.name} was captured without one: "
                "give the model as a transformers folder with its tokenizer.json, or drop --bundle."
            )
        problems = lm.check("android")
        if problems:
            raise ProblemsError(f"{lm.name} has {len(problems)} problem(s) for android; nothing was written:", problems)
        budget = LMBudget.from_options(
            min_top1=min_top1, max_perplexity_increase=max_perplexity_increase, allow_below_budget=allow_below_budget
        )
        return cls(lm, scheme, budget, eval, bundle or "none")

    def as_text(self) -> str:
        spec = self.bundle.decoder
        return (
            f"# android decoder: {self.bundle.name} (bundle {self.bundle.fingerprint[:16]}), entries "
            f"{', '.join(self.bundle.entry_names)}, cache {spec.cache_length}, scheme "
            f"{self.scheme if isinstance(self.scheme, str) else self.scheme.name}\n"
        )

    def compile(self, out_dir: Any = None):
        from tpuedge.edge.generative.decoder_artifact import LiteRTDecoderArtifact
        from tpuedge.edge.generative.bundle_tflite import float_bundle_tflite
        from tpuedge.edge.generative.decoder_files import MODEL_FILE
        from tpuedge.shared_ir.generative.decoder_manifest import decoder_manifest
        from tpuedge.edge.generative.decoder_accuracy import choose_and_measure
        from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
        from tpuedge.shared_ir.atomic import atomic_output_dir
        from tpuedge.shared_ir.manifest import write_build_manifest
        from tpuedge.shared_ir.stage_times import timed

        bundle = self.bundle
        out = Path(out_dir) if out_dir is not None else Path("build") / bundle.name / "android"
        with timed("litert-torch lowering (every entry point)"):
            float_tflite = float_bundle_tflite(bundle)
        chosen = choose_and_measure(
            bundle,
            float_tflite,
            self.scheme,
            self.budget,
            eval_file=self.eval_file,
            eval_positions=EVAL_POSITIONS,
            search_positions=SEARCH_POSITIONS,
            sequence_length=min(EVAL_SEQUENCE, bundle.decoder.cache_length),
            greedy_prompts=GREEDY_PROMPTS,
            greedy_tokens=GREEDY_TOKENS,
        )
        summary = summarize_tflite(chosen.tflite)
        with timed("writing"), atomic_output_dir(out) as stage:
            (stage / MODEL_FILE).write_bytes(chosen.tflite)
            files = [MODEL_FILE]
            if bundle.tokenizer is not None:
                files += bundle.tokenizer.write(stage)
            if self.bundle_format == "litertlm":
                from tpuedge.edge.generative.litertlm import write_litertlm

                files.append(write_litertlm(stage, MODEL_FILE, bundle))
            manifest = decoder_manifest(
                "android",
                bundle,
                stage,
                files=files,
                tools=TOOLS,
                recipe=chosen.recipe,
                accuracy=chosen.accuracy,
                accuracy_budget=chosen.budget_entry,
                sizes={
                    "tflite_bytes": len(chosen.tflite),
                    "float_tflite_bytes": len(float_tflite),
                    "weight_bytes": summary.weight_bytes,
                    "graph_bytes": summary.graph_bytes,
                    "parameter_count": bundle.parameter_count,
                },
            )
            manifest = write_build_manifest(stage, manifest)
        return LiteRTDecoderArtifact(out, manifest)
