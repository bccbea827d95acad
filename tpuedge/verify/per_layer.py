"""Per-layer numerics: every intermediate a runtime exposes, against the IR's own value.

- LiteRT (android) and TFLite-Micro (mcu): the flatbuffer run with every intermediate tensor
  kept (edge/intermediates/tflite_layers.py).
- cloud-tpu: the artifact's model.layers.jaxexport (every IR layer's value) with its
  model.safetensors, on XLA:CPU.

Runtime tensors are mapped to IR nodes (`tflite_graph.match_tensors`), dequantized and put
back into IR layout. Each layer's SNR is the per-channel SNR (see `metrics`); its drop is how
far it falls below the SNR of the nearest compared layers it reads from, so the layer that
introduces an error ranks first, not the ones downstream that inherit it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from tpuedge.shared_ir.errors import UserError
from tpuedge.verify.data import VerifyData
from tpuedge.shared_ir.ir_values import IntermediateRecorder, IRLayer, ir_layers
from tpuedge.quantize.metrics import SNR_CAP_DB, ErrorAccumulator
from tpuedge.verify.runner import (
    call_batch,
    call_chunks,
    single_torch_thread,
)

__all__ = [
    "LayerStat",
    "LayerReport",
    "layer_report",
    "accumulate_layers",
    "runtime_label",
    "DEFAULT_LAYER_SAMPLES",
]

DEFAULT_LAYER_SAMPLES = 64


def runtime_label(artifact) -> str:
    """The artifact's own name for its runtime (verify names no target)."""
    return getattr(artifact, "runtime_name", "") or artifact.target


@dataclass(frozen=True)
class LayerStat:
    node: str
    label: str  # "conv2d_1 (conv2: conv2d)"
    op: str
    module: str
    source: str
    tensor: str  # the runtime's name for it
    order: int
    snr_db: float  # per-channel SNR
    tensor_snr_db: float  # whole-tensor SNR
    cosine: float
    max_abs_error: float
    input_snr_db: float  # SNR of what this layer reads (nearest compared layers, or its inputs)
    drop_db: float  # input_snr_db - snr_db, ≥ 0

    @property
    def is_input(self) -> bool:
        return self.op == "input"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LayerReport:
    runtime: str
    target: str
    artifact: str
    samples: int
    ir_layers: int  # tensor-valued IR nodes
    layers: tuple[LayerStat, ...]  # compared layers in graph order (model inputs included)
    # IR nodes the runtime gave a tensor for whose shape is not the IR's: not compared, but counted
    shape_mismatches: tuple[str, ...] = ()  # "node: runtime (1, 64) vs IR (1, 4, 16)"
    # IR layers the runtime has a tensor for by structure (scope and shape; every layer for
    # cloud-tpu): what the compared count is measured against
    counterparts: int = 0

    def ranked(self) -> list[LayerStat]:
        """Compared layers (not the model inputs), largest SNR drop first."""
        # drops under 0.1 dB are noise (float rounding): those keep graph order
        return sorted((l for l in self.layers if not l.is_input), key=lambda l: (-round(l.drop_db, 1), l.order))

    def to_json(self) -> dict:
        return {
            "runtime": self.runtime,
            "target": self.target,
            "artifact": self.artifact,
            "samples": self.samples,
            "ir_layers": self.ir_layers,
            "layers": [l.to_json() for l in self.layers],
            "ranked": [l.node for l in self.ranked()],
            "shape_mismatches": list(self.shape_mismatches),
            "counterparts": self.counterparts,
        }


class _LayerSource(Protocol):
    def prepare(self, reference: dict[str, np.ndarray], inputs: list[np.ndarray]) -> None: ...

    def names(self) -> dict[str, str]: ...  # IR node -> runtime tensor name

    def counterparts(self) -> set[str]: ...  # IR layers with a runtime tensor, by structure

    def values(self, inputs: list[np.ndarray]) -> dict[str, np.ndarray]: ...  # IR layout


def _tflite_path(artifact) -> Path:
    for attribute in ("model_path", "tflite_path"):  # android / mcu artifacts name their file
        path = getattr(artifact, attribute, None)
        if path is not None and Path(path).is_file():
            return Path(path)
    directory = Path(artifact.directory)
    names = [n for n in (artifact.manifest.get("files") or {}) if n.endswith(".tflite")]
    path = directory / (names[0] if names else "model.tflite")
    if not path.is_file():
        raise UserError(f"{directory} has no .tflite model to read layers from; rebuild it with `tpuedge build`.")
    return path


def _source_for(artifact, program, layers: dict[str, IRLayer]) -> _LayerSource:
    kind = getattr(artifact, "layer_runtime", None)
    if kind in ("litert", "tflite-micro"):
        from tpuedge.edge.intermediates.tflite_layers import TfliteLayerSource

        return TfliteLayerSource(_tflite_path(artifact).read_bytes(), program, layers, micro=kind == "tflite-micro")
    if kind == "xla":
        from tpuedge.verify.cloud_layers import CloudLayerSource

        return CloudLayerSource(artifact, layers)
    raise UserError(
        f"Per-layer numerics are not available for {artifact.target!r} artifacts; they cover artifacts that run "
        "in LiteRT, TFLite-Micro or XLA. Compare the outputs only (drop --per-layer)."
    )


def _input_snrs(program, compared: dict[str, float], layers: dict[str, IRLayer]) -> dict[str, float]:
    """For each compared node: the lowest SNR among the nearest compared nodes it reads from."""
    nodes = {n.name: n for n in program.exported_program.graph.nodes}
    memo: dict[str, list[float]] = {}

    def upstream(name: str) -> list[float]:
        if name in memo:
            return memo[name]
        memo[name] = []
        found: list[float] = []
        for arg in nodes[name].all_input_nodes:
            if arg.name in compared:
                found.append(compared[arg.name])
            elif arg.name in layers and layers[arg.name].is_input:
                found.append(SNR_CAP_DB)  # an input the runtime doesn't expose: taken as exact
            elif arg.op == "call_function":
                found.extend(upstream(arg.name))
        memo[name] = found
        return found

    return {name: min(upstream(name), default=SNR_CAP_DB) for name in compared}


def _covered_nodes(program, compared: set[str], layers: dict[str, IRLayer]) -> dict[str, list[str]]:
    """Per compared node, the IR nodes its runtime tensor covers: itself and the uncompared
    nodes right before it that a converter fused into it (conv -> batch_norm -> relu)."""
    nodes = {n.name: n for n in program.exported_program.graph.nodes}
    covered = {}
    for name in compared:
        chain, node = [name], nodes[name]
        while True:
            inputs = [a for a in node.all_input_nodes if a.op == "call_function"]
            if len(inputs) != 1 or inputs[0].name in compared or len(inputs[0].users) != 1:
                break
            node = inputs[0]
            chain.append(node.name)
        covered[name] = [n for n in reversed(chain) if n in layers]
    return covered


def _label(node: str, chain: list[str], layers: dict[str, IRLayer]) -> str:
    """ "relu_1 (conv2 → bn2 → relu)": the node and what it covers, by module or op."""
    parts = []
    for name in chain:
        layer = layers[name]
        op = layer.op.split(".")[1] if layer.op.count(".") >= 2 else layer.op
        parts.append(layer.module or op)
    return f"{node} ({' → '.join(parts)})"


def accumulate_layers(
    reference: dict[str, np.ndarray],
    got: dict[str, np.ndarray],
    accumulators: dict[str, ErrorAccumulator],
    mismatches: dict[str, str],
) -> None:
    """Add one call's runtime values to the per-node sums; a value whose shape is not the IR's
    is recorded in `mismatches` (node -> what differed), never silently dropped."""
    for node, value in got.items():
        if node not in reference:
            continue
        if value.shape != reference[node].shape:
            mismatches.setdefault(node, f"{node}: runtime {tuple(value.shape)} vs IR {tuple(reference[node].shape)}")
            continue
        accumulators.setdefault(node, ErrorAccumulator()).update(reference[node], value)


def _equalized(manifest: dict) -> bool:
    """Whether the build kept cross-layer equalization (quantize/precision_search.py): android's manifest holds
    the recipe at the top, mcu's under "quantization"."""
    recipe = manifest.get("recipe") or (manifest.get("quantization") or {}).get("recipe") or {}
    return bool((recipe.get("cross_layer_equalization") or {}).get("kept"))


def layer_report(artifact, program, data: VerifyData, *, samples: int = DEFAULT_LAYER_SAMPLES) -> LayerReport:
    """Compare every layer `artifact`'s runtime exposes with the IR, on the first `samples` samples."""
    layers = ir_layers(program)
    source = _source_for(artifact, program, layers)
    reference_program = program
    if getattr(artifact, "layer_runtime", None) in ("litert", "tflite-micro"):
        # values from the IR the converter saw: the same outputs and node names, but an
        # attention mask's -inf already bounded (else every masked logit reads as an error)
        from tpuedge.edge.litert.litert_lowering import litert_ir_passes
        from tpuedge.shared_ir.program import Program

        exported = program.exported_program
        if _equalized(artifact.manifest):  # the build converted the program with its channels rescaled
            from tpuedge.shared_ir.passes.cross_layer_equalization import CrossLayerEqualization

            exported, _ = CrossLayerEqualization()(exported)
        reference_program = Program(litert_ir_passes(exported), name=program.name)
    recorder = IntermediateRecorder(reference_program)
    subset = data.head(samples)
    batch = call_batch(program.inputs, subset.count, subset.whole_calls)
    accumulators: dict[str, ErrorAccumulator] = {}
    mismatches: dict[str, str] = {}
    for number, (args, _) in enumerate(call_chunks(subset.rows, batch, whole_calls=subset.whole_calls)):
        with single_torch_thread():
            reference = recorder(*args)
        if number == 0:
            source.prepare(reference, args)
        accumulate_layers(reference, source.values(args), accumulators, mismatches)
    snrs = {node: acc.channel_snr_db for node, acc in accumulators.items()}
    covered = _covered_nodes(program, set(accumulators), layers)
    inputs = _input_snrs(program, snrs, layers)
    names = source.names()
    stats = []
    for node, acc in accumulators.items():
        layer = layers[node]
        drop = 0.0 if layer.is_input else max(0.0, inputs[node] - snrs[node])
        stats.append(
            LayerStat(
                node=node,
                label=_label(node, covered[node], layers),
                op=layer.op,
                module=layer.module,
                source=layer.source,
                tensor=names.get(node, node),
                order=layer.order,
                snr_db=round(snrs[node], 3),
                tensor_snr_db=round(acc.snr_db, 3),
                cosine=acc.cosine,
                max_abs_error=acc.max_abs,
                input_snr_db=round(inputs[node], 3),
                drop_db=round(drop, 3),
            )
        )
    stats.sort(key=lambda s: s.order)
    return LayerReport(
        runtime=runtime_label(artifact),
        target=artifact.target,
        artifact=str(artifact.directory),
        samples=subset.count,
        ir_layers=sum(1 for l in layers.values() if not l.is_input),
        layers=tuple(stats),
        shape_mismatches=tuple(mismatches[n] for n in sorted(mismatches, key=lambda n: layers[n].order)),
        counterparts=len(source.counterparts() | {n for n in accumulators if not layers[n].is_input}),
    )
