"""A built mcu folder (`McuArtifact`): run model.tflite in TFLite-Micro, format the build report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["McuArtifact"]


class McuArtifact:
    """A built mcu folder; `run` executes model.tflite in the TFLite-Micro interpreter."""

    runtime_name = "TFLite-Micro (mcu)"
    layer_runtime = "tflite-micro"

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

    @property
    def ir_inputs(self) -> list:
        """The inputs in the model's own layout (the IR signature): NCHW where the device takes NHWC."""
        from tpuedge.shared_ir.tensors import TensorSpec

        if self.manifest.get("layout") != "NHWC":
            return self.inputs
        return [TensorSpec(s.name, _nchw(s.shape), s.dtype) if _is_image(s) else s for s in self.inputs]

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """Float in, float out, in TFLite-Micro (int8 I/O quantized with the tensors' parameters).

        Takes each input in the model's layout (NCHW as exported), transposed here to the NHWC
        the device reads, or already NHWC where its shape says so (a shape both layouts share,
        C = H = W, is read as the model's)."""
        from tpuedge.edge.mcu.tflm_runtime import TflmRunner
        from tpuedge.shared_ir.tensors import to_numpy, validate_inputs

        device, model = self.inputs, self.ir_inputs
        given = [to_numpy(x) for x in inputs]
        # an input already in the device's layout passes as it is; every other one is read as the model's
        nhwc_given = [d != m and _fits(d, x.shape) and not _fits(m, x.shape) for d, m, x in zip(device, model, given)]
        nhwc_given += [False] * (len(model) - len(nhwc_given))
        specs = [d if nhwc else m for d, m, nhwc in zip(device, model, nhwc_given)]
        where = f"mcu artifact {self.directory}"
        wrong = [
            f"input {m.name!r} has shape {list(x.shape)}; it takes {list(m.shape)} (the model's NCHW, transposed "
            f"on the host) or {list(d.shape)} (NHWC, as the device and model_data.h take it)"
            for d, m, x in zip(device, model, given)
            if d != m and not _fits(d, x.shape) and not _fits(m, x.shape)
        ]
        if wrong and len(given) == len(model):
            from tpuedge.shared_ir.errors import UserError

            raise UserError(
                f"{where}: " + "; ".join(wrong) + ". Feed arrays of the shapes the model was exported with."
            )
        arrays = validate_inputs(specs, given, where)
        arrays = [
            a if nhwc or d == m else np.ascontiguousarray(a.transpose(0, 2, 3, 1))
            for a, d, m, nhwc in zip(arrays, device, model, nhwc_given)
        ]
        if self._runner is None:
            self._runner = TflmRunner(
                self.tflite_path.read_bytes(), self.recommended_arena_bytes, source=self.tflite_path
            )
        return self._runner.run(arrays)

    def report(self) -> str:
        m = self.manifest
        lines = [f"mcu build of {m['model_name']} (IR {m['ir_fingerprint'][:12]}) -> {self.directory}"]
        for r in m.get("rewrites", []):
            lines.append(f"  rewrite: {r['description']}; cost vs original float: {r['accuracy_cost_text']}")
        ops = ", ".join(f"{o['op']}x{o['count']}" for o in m["tflm_ops"])
        lines.append(f"  TFLite-Micro ops ({len(m['tflm_ops'])}): {ops}")
        from tpuedge.edge.litert.trained_ranges import ranges_line

        from tpuedge.edge.android.artifact import precision_lines

        trained = ranges_line(m["quantization"]["recipe"])
        lines += [trained] if trained else []
        lines += precision_lines(m["quantization"]["recipe"])
        io = m["quantization"]["io"]
        lines.append(
            "  I/O: "
            + ", ".join(f"{t['name']} {t['dtype']}{t['shape']}" for t in io["inputs"] + io["outputs"])
            + " (integer graph, every buffer inside the flatbuffer)"
        )
        arena = m["arena"]
        lines.append(f"  flash: {m['flash_bytes']:,} bytes (model array)")
        lines.append(
            f"  arena: {arena['measured_bytes']:,} bytes measured (TFLM, to {arena['bisection_step_bytes']} B), "
            f"recommended {arena['recommended_bytes']:,} ({arena['margin']})"
        )
        for label, v in m["verification"].items():
            text = (
                f"  {label} ({v['samples']} samples, {v.get('inputs', label)}): TFLM vs LiteRT max {v['tflm_vs_litert_max_lsb']} LSB (measured); "
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
        from tpuedge.quantize.budget_report import describe_budget

        budget = describe_budget(m.get("accuracy_budget"))
        if budget:
            lines.append(budget)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"McuArtifact({str(self.directory)!r})"


def _is_image(spec) -> bool:
    """The inputs a channels-last build takes NHWC: rank-4 float (edge/litert/channels_last.py)."""
    return len(spec.shape) == 4 and spec.dtype.startswith("float")


def _nchw(shape) -> tuple:
    n, h, w, c = shape
    return (n, c, h, w)


def _fits(spec, shape) -> bool:
    return len(shape) == len(spec.shape) and all(not isinstance(e, int) or e == a for e, a in zip(spec.shape, shape))
