"""The `cloud-tpu` target (light module: no jax or torch import here).

`tpuedge build MODEL --target cloud-tpu --out DIR [--topology v5e:2x2] [--batch N] [--train-step]`
lowers the shared IR to JAX, writes StableHLO and a portable jax.export blob (cpu + tpu), checks
it on XLA:CPU against the Program, and — when libtpu is installed — compiles the forward (and
with --train-step a data-parallel AdamW training step) for a real TPU slice without a TPU.
A decoder bundle (a language model) builds through cloud/generative/decoder_build.py instead.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuedge.cloud.topologies import DEFAULT_TOPOLOGY, TopologyChoice, parse_topology, valid_topologies_text
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.targets import BuildOption, Capability, Target

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["CloudTpuTarget", "CloudLowered"]

# tpu_programs.TRAIN_LOSSES / TRAIN_SHARDINGS, repeated here to keep this module light
_LOSSES = ("auto", "cross_entropy", "mse")
_SHARDINGS = ("data", "fsdp")
# options of one kind of model only: a language model's (capture, budget), a single-entry model's (training)
_CAPTURE = ("prefill_lengths", "cache_length", "buckets")
_LM_ONLY = (*_CAPTURE, "min_top1", "max_perplexity_increase", "allow_below_budget")
_SINGLE_ONLY = ("train_step", "loss", "sharding")


class CloudLowered:
    """A Program lowered for cloud-tpu: `as_text()` is the forward's StableHLO, `compile(dir)`
    writes the artifact folder (see cloud/artifact.py)."""

    def __init__(
        self,
        program: "Program",
        *,
        topology: TopologyChoice,
        batch: int | None = None,
        train_step: bool = False,
        loss: str = "auto",
        sharding: str = "data",
    ):
        from tpuedge.cloud.batch_rebind import batch_size, rebind_batch
        from tpuedge.shared_ir.stage_times import timed

        self.source_program = program
        with timed("batch rebind"):
            self.program = rebind_batch(program, batch)
        self.topology = topology
        self.train_step = bool(train_step)
        self.loss = loss
        self.sharding = sharding
        before = batch_size(program)
        self.batch_info = {
            "size": batch_size(self.program),
            "rebound_from": before if self.program is not program else None,
            "dimension": 0,
        }

    @cached_property
    def forward_export(self):
        from tpuedge.shared_ir.stage_times import timed

        with timed("import jax"):
            import jax  # noqa: F401

            from tpuedge.cloud.stablehlo_export import forward_export
        with timed("lower to JAX (ATen->JAX interpreter, decompositions)"):
            return forward_export(self.program)

    @cached_property
    def _text(self) -> str:
        from tpuedge.cloud.stablehlo_export import stablehlo_text
        from tpuedge.shared_ir.stage_times import timed

        with timed("StableHLO text (jax.jit lower)"):
            return stablehlo_text(self.forward_export, self.program)

    def as_text(self) -> str:
        """StableHLO of the forward: `forward(params, buffers, *inputs)`, weights as arguments."""
        return self._text

    def compile(self, out_dir: Any = None):
        from tpuedge.cloud.artifact_writer import write_cloud_artifact

        out = Path(out_dir) if out_dir is not None else Path("build") / self.program.name / "cloud-tpu"
        return write_cloud_artifact(self, out)

    def __repr__(self) -> str:
        return f"CloudLowered({self.program.name!r}, topology={self.topology.name!r}, batch={self.batch_info['size']})"


class CloudTpuTarget(Target):
    name = "cloud-tpu"
    summary = "JAX/StableHLO for XLA on Cloud TPU (runs on CPU/GPU the same way)"
    runtime = "XLA (jax.export)"
    implemented = True

    def capability(self) -> Capability:
        from tpuedge.cloud.capability import cloud_capability

        return cloud_capability()

    def ir_evaluator(self) -> Any:
        from tpuedge.cloud.ir_evaluator import JaxIREvaluator

        return JaxIREvaluator()

    def build_options(self) -> list[BuildOption]:
        from tpuedge.quantize.budget_options import budget_build_options
        from tpuedge.quantize.lm_budget import perplexity_build_option
        from tpuedge.shared_ir.generative.capture import capture_build_options

        shared = {o.name: o for o in budget_build_options()}
        return [
            BuildOption(
                "topology",
                f"TPU slice to compile for without a TPU (needs libtpu): {valid_topologies_text()}",
                str,
                DEFAULT_TOPOLOGY,
            ),
            BuildOption(
                "batch",
                "rebind the batch dimension (dim 0 of every input) to N; a language model: the batch of "
                "sequences its TPU memory plan is compiled at (default 8)",
                int,
                None,
            ),
            BuildOption(
                "train_step",
                "also compile an AdamW training step in training mode (BatchNorm batch statistics, dropout on), sharded over the topology (see --sharding)",
                bool,
                False,
            ),
            BuildOption(
                "loss",
                "loss of the --train-step compile (auto: cross-entropy for [batch, classes] logits, else MSE)",
                _LOSSES,
                "auto",
            ),
            BuildOption(
                "sharding",
                "--train-step parallelism: data (params replicated) or fsdp (params and AdamW state sharded)",
                _SHARDINGS,
                "data",
            ),
            *capture_build_options(),
            shared["min_top1"],
            perplexity_build_option(),
            shared["allow_below_budget"],
        ]

    def lower(
        self,
        program: "Program",
        topology: str = DEFAULT_TOPOLOGY,
        batch: int | None = None,
        train_step: bool = False,
        loss: str = "auto",
        sharding: str = "data",
        **unknown: Any,
    ) -> CloudLowered:
        unknown = self.options_except(unknown, _LM_ONLY, "a single-entry model")
        if unknown:
            raise UserError(
                f"cloud-tpu does not take option(s) {', '.join(sorted(unknown))}; its options are "
                f"{', '.join(o.name for o in self.build_options())}."
            )
        if loss not in _LOSSES:
            raise UserError(f"Unknown loss {loss!r} for cloud-tpu; choose one of: {', '.join(_LOSSES)}.")
        if sharding not in _SHARDINGS:
            raise UserError(f"Unknown sharding {sharding!r} for cloud-tpu; choose one of: {', '.join(_SHARDINGS)}.")
        choice = parse_topology(topology or DEFAULT_TOPOLOGY)  # validated before any heavy work
        return CloudLowered(program, topology=choice, batch=batch, train_step=train_step, loss=loss, sharding=sharding)

    def lower_bundle(self, program_bundle, /, **options: Any):
        if program_bundle.kind != "decoder":
            return super().lower_bundle(program_bundle, **options)
        from tpuedge.cloud.generative.decoder_build import CloudDecoderLowered

        given = self.options_except(options, _SINGLE_ONLY, "a language model")
        captured = sorted(k for k in _CAPTURE if given.pop(k, None) is not None)
        if captured:
            raise UserError(
                f"{', '.join('--' + k.replace('_', '-') for k in captured)} set(s) how a decoder is captured, and "
                f"{program_bundle.name} is captured already; give it with the model, not to its build."
            )
        choice = parse_topology(given.pop("topology", None) or DEFAULT_TOPOLOGY)
        return CloudDecoderLowered.create(program_bundle, topology=choice, **given)

    def load_artifact(self, path: Any):
        from tpuedge.cloud.artifact import CloudArtifact
        from tpuedge.shared_ir.artifact import read_manifest

        path = Path(path)
        manifest = read_manifest(path)
        if manifest.get("target") != self.name:
            raise UserError(
                f"{path} holds a {manifest.get('target')!r} build, not cloud-tpu; open it with tpuedge.load."
            )
        if "decoder" in manifest:
            from tpuedge.cloud.generative.decoder_artifact import CloudDecoderArtifact

            return CloudDecoderArtifact(path, manifest)
        return CloudArtifact(path, manifest)
