"""cloud-tpu for a decoder bundle: every entry's step as jax.export and StableHLO, measured on XLA.

    bundle.lower("cloud-tpu", topology="v5e:2x2", batch=8).compile("build/lm/cloud-tpu")

compile() lowers the bundle's entries to JAX (jax_decoder.py), exports each step with a
symbolic batch (decoder_export.py), runs the exported steps back on XLA:CPU against the float
IR in torch (teacher-forced top-1 agreement and perplexity on held-out text, greedy
continuations: the token metrics every target's decoder build reports, under the same LM budget),
plans TPU memory for the decode step when libtpu is installed (decoder_tpu_plan.py), and writes
the folder atomically:

    <step>.jax_export            decode (every row), prefill_<n> and decode_row (one row)
    <step>.stablehlo.mlir        the same steps as StableHLO text
    weights.safetensors          the weights once ("param/<name>"), each entry's buffers
    tokenizer files, manifest.json, tpu_plan.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["CloudDecoderLowered", "EVAL_POSITIONS"]

EVAL_POSITIONS = 256
EVAL_SEQUENCE = 128
GREEDY_PROMPTS = 3
GREEDY_TOKENS = 16
TOOLS = ("jax", "jaxlib", "libtpu")
DEFAULT_PLAN_BATCH = 8


class CloudDecoderLowered:
    def __init__(self, bundle, topology, batch: int, budget, eval_file):
        self.bundle, self.topology, self.batch, self.budget, self.eval_file = bundle, topology, batch, budget, eval_file

    @classmethod
    def create(
        cls,
        bundle,
        /,
        *,
        topology,
        batch: int | None = None,
        eval: Any = None,  # noqa: A002
        min_top1: float | None = None,
        max_perplexity_increase: float | None = None,
        allow_below_budget: bool = False,
    ) -> "CloudDecoderLowered":
        from tpuedge.quantize.lm_budget import LMBudget
        from tpuedge.shared_ir.errors import ProblemsError

        problems = bundle.check("cloud-tpu")
        if problems:
            raise ProblemsError(
                f"{bundle.name} has {len(problems)} problem(s) for cloud-tpu; nothing was written:", problems
            )
        if batch is not None and int(batch) < 1:
            raise UserError(
                f"--batch {batch}: a language model's TPU memory plan needs a batch of at least 1 sequence."
            )
        budget = LMBudget.from_options(
            min_top1=min_top1, max_perplexity_increase=max_perplexity_increase, allow_below_budget=allow_below_budget
        )
        return cls(bundle, topology, int(batch or DEFAULT_PLAN_BATCH), budget, eval)

    def as_text(self) -> str:
        from tpuedge.cloud.generative.decoder_export import export_steps
        from tpuedge.cloud.generative.jax_decoder import JaxDecoder

        exported = export_steps(JaxDecoder(self.bundle))
        return exported["decode"].mlir_module()

    def compile(self, out_dir: Any = None):
        out = Path(out_dir) if out_dir is not None else Path("build") / self.bundle.name / "cloud-tpu"
        return write_decoder_artifact(self, out)


def _measure(lowered, steps) -> Any:
    """The token metrics of the exported steps on XLA:CPU against the float IR in torch."""
    from tpuedge.quantize.lm_schemes import lm_scheme
    from tpuedge.quantize.lm_search import choose_lm_scheme
    from tpuedge.quantize.lm_text import HELD_OUT, evaluation_text, prompt_ids

    bundle = lowered.bundle
    spec = bundle.decoder
    held_out = evaluation_text(
        bundle.tokenizer,
        half=HELD_OUT,
        sequence_length=min(EVAL_SEQUENCE, spec.cache_length),
        vocab_size=spec.vocab_size,
        positions=EVAL_POSITIONS,
        text_file=lowered.eval_file,
    )
    return choose_lm_scheme(
        name=bundle.name,
        target="cloud-tpu",
        reference=bundle.reference(),
        build=lambda scheme: None,
        runner_of=lambda _: steps.step_runner(),
        scheme=lm_scheme("none"),
        budget=lowered.budget,
        search_text=held_out,
        eval_text=held_out,
        prompts=prompt_ids(bundle.tokenizer, spec.vocab_size, GREEDY_PROMPTS),
        greedy_tokens=GREEDY_TOKENS,
    )


def write_decoder_artifact(lowered, out: Path):
    import jax

    from tpuedge.cloud.generative.decoder_artifact import CloudDecoderArtifact
    from tpuedge.cloud.generative.decoder_export import ExportedSteps, export_steps
    from tpuedge.cloud.generative.decoder_files import WEIGHTS_FILE, split_weights, step_file, weight_tensors
    from tpuedge.cloud.generative.decoder_tpu_plan import TPU_PLAN_FILE, decoder_tpu_plan
    from tpuedge.cloud.generative.jax_decoder import JaxDecoder
    from tpuedge.cloud.safetensors_file import write_safetensors
    from tpuedge.shared_ir.atomic import atomic_output_dir
    from tpuedge.shared_ir.generative.decoder_manifest import decoder_manifest
    from tpuedge.shared_ir.manifest import write_build_manifest
    from tpuedge.shared_ir.stage_times import timed

    bundle = lowered.bundle
    with timed("JAX lowering (every entry point)"):
        decoder = JaxDecoder(bundle)
    with timed("jax.export (every step)"):
        blobs = {name: exported.serialize() for name, exported in export_steps(decoder).items()}
    tensors = weight_tensors(decoder)
    params, buffers = split_weights(tensors)
    # what is measured is what is written: the steps read back from their serialized bytes
    steps = ExportedSteps(
        bundle.decoder,
        {n: jax.export.deserialize(bytearray(b)) for n, b in blobs.items()},
        params,
        buffers,
        bundle.name,
        bundle.tokenizer,
    )
    with timed("token accuracy (XLA:CPU vs the float IR in torch)"):
        choice = _measure(lowered, steps)
    with timed("TPU memory plan (XLA:TPU compile, no TPU)"):
        plan, plan_status = decoder_tpu_plan(decoder, lowered.topology, lowered.batch)
    with timed("writing"), atomic_output_dir(out) as stage:
        files = []
        for name, blob in sorted(blobs.items()):
            (stage / step_file(name)).write_bytes(blob)
            (stage / step_file(name, "stablehlo.mlir")).write_text(steps.exported_text(name))
            files += [step_file(name), step_file(name, "stablehlo.mlir")]
        write_safetensors(stage / WEIGHTS_FILE, tensors, {"format": "pt", "producer": "tpuedge cloud-tpu decoder"})
        files.append(WEIGHTS_FILE)
        if bundle.tokenizer is not None:
            files += bundle.tokenizer.write(stage)
        if plan is not None:
            (stage / TPU_PLAN_FILE).write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
        manifest = decoder_manifest(
            "cloud-tpu",
            bundle,
            stage,
            files=files,
            tools=TOOLS,
            accuracy=choice.accuracy,
            accuracy_budget=choice.budget_entry,
            tpu_plan=plan_status,
            jax_export={
                "steps": sorted(blobs),
                "batch": "symbolic (b)",
                "platforms": list(steps.platforms),
                "calling_convention": {
                    "decode": "call(params, buffers, cache, tokens [b, 1], input_pos [b, 1]) -> "
                    "(logits [b, vocab], greedy [b], cache)",
                    "prefill_<n> / decode_row": "call(params, buffers, cache, slot, tokens [1, n], "
                    "input_pos [1, n]) -> cache",
                },
            },
            sizes={
                "weight_bytes": int(sum(v.nbytes for v in params.values())),
                "parameter_count": bundle.parameter_count,
            },
        )
        manifest = write_build_manifest(stage, manifest)
    return CloudDecoderArtifact(out, manifest)
