"""`LiteRTArtifact`: a built android folder (model.tflite + manifest.json) or a bare .tflite,
run in the real LiteRT interpreter."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.artifact import MANIFEST, Artifact, read_manifest
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import validate_inputs

__all__ = ["LiteRTArtifact", "MODEL_FILE", "open_litert_artifact", "format_report"]

MODEL_FILE = "model.tflite"


class LiteRTArtifact(Artifact):
    """`run(*inputs)`: float in/out (int8 I/O quantized with the tensors' own scale/zero point);
    `run_raw(*inputs)`: the model's own I/O dtypes; `report()`: the console summary."""

    runtime_name = "LiteRT (android)"
    layer_runtime = "litert"

    def __init__(self, directory: Path, manifest: dict, model_path: Path | None = None):
        super().__init__(directory, manifest)
        self.model_path = Path(model_path) if model_path else self.directory / MODEL_FILE

    @property
    def fingerprint(self) -> str:
        return self.manifest.get("ir_fingerprint") or "unknown"

    @cached_property
    def tflite(self) -> bytes:
        from tpuedge.edge.flatbuffer.tflite_file import read_model

        if not self.model_path.is_file():
            raise UserError(f"{self.model_path} is missing; rebuild with `tpuedge build ... --target android`.")
        data = self.model_path.read_bytes()
        read_model(data, self.model_path)  # a damaged file is a UserError here, not a crash in a runtime
        return data

    @cached_property
    def runner(self):
        from tpuedge.edge.litert.litert_runtime import LiteRTRunner

        return LiteRTRunner(self.tflite, num_threads=1)

    @cached_property
    def summary(self):
        from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite

        return summarize_tflite(self.tflite, self.model_path)

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """Float in, float out, in the LiteRT interpreter."""
        arrays = validate_inputs(self.inputs, inputs, f"android artifact {self.directory}")
        return self.runner.run(arrays)

    def run_raw(self, *inputs: Any) -> list[np.ndarray]:
        """Exact tensors in the model's I/O dtypes (int8 in and out for --io-dtype int8)."""
        return self.runner.run_raw([np.asarray(x) for x in inputs])

    def report(self) -> str:
        return format_report(self.manifest, self.summary, self.model_path)


def _manifest_from_tflite(path: Path, data: bytes) -> dict:
    from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite

    summary = summarize_tflite(data, path)

    def spec(t):
        dtype = "float32" if t.quantized else t.dtype
        return {"name": t.name, "shape": list(t.shape), "dtype": dtype}

    return {
        "target": "android",
        "ir_fingerprint": None,
        "model_name": path.stem,
        "inputs": [spec(t) for t in summary.inputs],
        "outputs": [spec(t) for t in summary.outputs],
    }


def open_litert_artifact(path: Path) -> LiteRTArtifact:
    """A build folder, or a .tflite (its folder's manifest is used when it has one)."""
    path = Path(path)
    if path.is_dir():
        manifest = read_manifest(path)
        if "decoder" in manifest:  # a language model: prefill and decode signatures
            from tpuedge.edge.generative.decoder_artifact import LiteRTDecoderArtifact

            return LiteRTDecoderArtifact(path, manifest)
        if "buckets" in manifest:  # a signature per size of a variable axis
            from tpuedge.edge.generative.bucket_artifact import LiteRTBucketsArtifact

            return LiteRTBucketsArtifact(path, manifest)
        return LiteRTArtifact(path, manifest)
    if not path.is_file():
        raise UserError(f"{path} does not exist; build it with `tpuedge build MODEL --target android`.")
    if (path.parent / MANIFEST).is_file() and path.name == MODEL_FILE:
        manifest = read_manifest(path.parent)
        if manifest.get("target") == "android":
            return LiteRTArtifact(path.parent, manifest, path)
    return LiteRTArtifact(path.parent, _manifest_from_tflite(path, path.read_bytes()), path)


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def precision_lines(recipe: dict) -> list[str]:
    """The int8 search's outcome for a build report: every op group not int8 and why, the search's
    numbers, and with --strict-int8 what that cost against the default recipe (android and mcu)."""
    lines = [
        f"  not int8: {item['group']} -> {item['precision']}: {item['why']}" for item in recipe.get("non_int8_ops", [])
    ]
    if recipe.get("search"):
        s = recipe["search"]
        lines.append(
            f"  int8 search: all-int8 cosine {s['all_int8_cosine']}, final {s['final_cosine']} "
            f"(target {s['target_cosine']}, {s['evaluations']} measured recipe(s))"
        )
    dropped = recipe.get("int16_dropped_for_the_board")
    if dropped:
        lines.append(
            f"  int16 dropped: with int16 activations ({', '.join(dropped['int16_groups'])}) the arena needs "
            f"{dropped['arena_bytes_with_int16']:,} bytes, over the board's {dropped['ram_budget_bytes']:,}; every op is int8"
        )
    cost = recipe.get("strict_int8_cost")
    if cost:
        strict, mixed = cost["strict_int8"], cost["mixed"]
        islands = (
            ", ".join(f"{i['group']} {i['precision']}" for i in cost["mixed_non_int8_ops"]) or "none: all-int8 too"
        )
        lines.append(
            f"  strict int8 costs {cost['cost']['centered_cosine']:+.5f} centered cosine: strict {strict['centered_cosine']:.5f} "
            f"vs {mixed['centered_cosine']:.5f} for the default mixed recipe (not int8 there: {islands}); "
            f"cosine {strict['cosine']:.5f} vs {mixed['cosine']:.5f}, max abs err {strict['max_abs_error']:.3g} vs "
            f"{mixed['max_abs_error']:.3g} ({cost['samples']} calibration samples)"
        )
    return lines


def format_report(manifest: dict, summary, model_path: Path) -> str:
    if manifest.get("ir_fingerprint"):
        lines = [f"{manifest.get('model_name', model_path.stem)} -> {model_path}  (target {manifest['target']})"]
    else:  # a bare file: nothing says which target or IR it came from
        lines = [
            f"{model_path}: a .tflite without a tpuedge manifest (target and IR unknown); run in the LiteRT interpreter"
        ]
    if manifest.get("ir_fingerprint"):
        lines.append(f"  IR fingerprint {manifest['ir_fingerprint'][:16]}")
    recipe = manifest.get("recipe") or {}
    if recipe:
        cfg = recipe.get("config", {})
        lines.append(
            f"  quantize {recipe.get('scheme')}  io {cfg.get('io_dtype')}  "
            f"{'per-channel' if cfg.get('per_channel', True) else 'per-tensor'}"
            + ("  strict-int8" if cfg.get("strict_int8") else "")
            + ("  channels-last (NHWC inputs)" if cfg.get("channels_last") else "")
        )
        from tpuedge.edge.litert.trained_ranges import ranges_line

        trained = ranges_line(recipe)
        lines += [trained] if trained else []
    if recipe.get("auto"):
        from tpuedge.quantize.auto import auto_table, candidates_from_json

        auto = recipe["auto"]
        lines.append(f"  --quantize auto chose {auto['chosen']} ({auto['rule']}; {auto['samples']} {auto['inputs']}):")
        lines += ["  " + line for line in auto_table(*candidates_from_json(auto))]
        for label, key in (
            ("LiteRT refused to run", "refused_by_litert"),
            ("ai-edge-quantizer could not make", "not_quantized"),
        ):
            lines += [
                f"    {scheme}: not a candidate ({label}: {why})" for scheme, why in (auto.get(key) or {}).items()
            ]
    lines.append("  inputs / outputs:")
    for kind, tensors in (("in ", summary.inputs), ("out", summary.outputs)):
        for t in tensors:
            lines.append(f"    {kind} {t.describe()}")
    sizes = manifest.get("sizes") or {}
    size_line = (
        f"  size {_kb(summary.file_bytes)} = weights {_kb(summary.weight_bytes)} + graph {_kb(summary.graph_bytes)}"
    )
    if sizes.get("float_tflite_bytes"):
        size_line += f"; {summary.file_bytes / sizes['float_tflite_bytes']:.2f}x the float model ({_kb(sizes['float_tflite_bytes'])})"
    lines.append(size_line)
    if summary.external_buffers:
        lines.append(f"  {summary.external_buffers} buffer(s) stored outside the flatbuffer (offset/size)")
    lines.append(
        f"  weights by dtype: {', '.join(f'{k} {_kb(v)}' for k, v in summary.weight_dtypes.items()) or 'none'}"
    )
    lines.append(
        f"  activation tensors by dtype: {', '.join(f'{k} x{v}' for k, v in summary.activation_dtypes.items())}"
    )
    lines.append("  ops: " + ", ".join(f"{op} x{n}" for op, n in summary.op_histogram.items()))
    lines += precision_lines(recipe)
    acc = manifest.get("accuracy")
    if acc:
        top1 = "n/a" if acc.get("top1_agreement") is None else f"{100 * acc['top1_agreement']:.1f}%"
        lines.append(
            f"  accuracy vs float IR ({acc['samples']} {acc.get('inputs', 'samples')}, LiteRT): max abs err "
            f"{acc['max_abs_error']:.3g} (output range {acc['output_range']:.3g}), cosine {acc['cosine']:.5f}, "
            f"centered cosine {acc['centered_cosine']:.5f}, top-1 agreement {top1}"
        )
    from tpuedge.quantize.budget_report import describe_budget

    budget = describe_budget(manifest.get("accuracy_budget"))
    if budget:
        lines.append(budget)
    return "\n".join(lines)
