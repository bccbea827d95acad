"""The mcu build's verification: the integer model in TFLite-Micro against LiteRT (in LSB) and
against the float Program, on the samples the build reports accuracy on, and the message for an
integer model LiteRT will not prepare."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.edge.mcu.mcu_runtimes import McuRuntimes
    from tpuedge.shared_ir.program import Program

__all__ = ["unpreparable_message", "verification_sets", "verify_runs", "layout_spec"]


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def unpreparable_message(name: str, tflite: bytes, exc: Exception) -> str:
    """The error for an integer model LiteRT will not prepare (TFLite-Micro's kernels make the same
    checks). The case met: a CONV_2D whose output scale is so small (6e-11, a random-init
    MobileNetV2 whose activations shrink 20x a layer) that its fused RELU6's bound overflows int32
    steps (kernel_util.cc: no_integer_overflow_from_quantization)."""
    import re

    from tpuedge.edge.flatbuffer import tflite_file

    said = " ".join(str(exc).split())
    where = ""
    found = re.search(r"Node number (\d+) \((\w+)\)", said)
    if found:
        model = tflite_file.read_model(tflite)
        graph = model.subgraphs[0]
        index = int(found.group(1))
        if index < len(graph.operators) and len(graph.operators[index].outputs):
            scales = tflite_file.tensor_quantization(graph.tensors[graph.operators[index].outputs[0]])[0]
            if scales.size and float(scales.max()) < 1e-6:
                where = (
                    f" Its {found.group(2)} (op {index}) was calibrated to outputs of about "
                    f"{float(scales.max()) * 127:.1e}: at a scale of {float(scales.max()):.1e} its activation's "
                    "bounds do not fit in int32 steps. The layer's activations are near zero on the "
                    "calibration data."
                )
    return (
        f"{name}: the integer mcu model can't run: {said.rstrip('.')}; nothing was written.{where} Give "
        "calibration data that drives the model as its real inputs do, and check that the model's weights "
        "are the trained ones (a layer scaled near zero)."
    )


def verification_sets(evaluation, held_out: list, calibration: list) -> list[tuple]:
    """(label, samples, labels, kind) the verification runs on: --eval data, else the calibration
    samples held out of calibration, else (too few to hold any out) calibration samples."""
    from tpuedge.quantize import accuracy_samples as acc

    if evaluation is not None:
        return [("evaluation", evaluation.samples, evaluation.labels, acc.EVAL)]
    if held_out:
        return [("held_out", held_out, None, acc.HELD_OUT)]
    return [("calibration", calibration[:200], None, acc.CALIBRATION)]


def verify_runs(
    program: "Program", runtime: "McuRuntimes", sets: list[tuple], calibration_samples: int, evaluation
) -> tuple[dict, tuple]:
    """TFLM vs LiteRT (LSB) and vs the float Program on each of `sets` (`verification_sets`),
    labelled by where the samples came from. Also returns (kind, float outputs, TFLM outputs,
    labels) of those samples, for the budget."""
    from tpuedge.edge.litert.litert_runtime import ModelRunError, refused_on_budget_samples
    from tpuedge.quantize.metrics import compare_outputs, stack_samples, task_accuracy

    report: dict = {}
    for label, samples, labels, kind in sets:
        tflm_raw, litert_raw, floats = [], [], []
        for s in samples:
            q = runtime.quantized(s)
            tflm_raw.append(runtime.tflm.run_raw(q))
            try:
                litert_raw.append(runtime.litert.run_raw(q))
            except ModelRunError as exc:
                raise refused_on_budget_samples(
                    program.name,
                    "mcu int8",
                    kind,
                    exc,
                    "TFLite-Micro has no such check and runs on, on a "
                    "meaningless quotient. Keep the divisor away from zero in the model (a margin added to it), or give "
                    "calibration data that covers those inputs.",
                ) from None
            floats.append(program.run(*s))
        lsb = max(
            int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max()) if a.size else 0
            for ta, tb in zip(tflm_raw, litert_raw)
            for a, b in zip(ta, tb)
        )
        tflm_float = [runtime.dequantized(o) for o in tflm_raw]
        entry = {
            "samples": len(samples),
            "inputs": kind,
            "calibration_samples_used": calibration_samples,
            "tflm_vs_litert_max_lsb": lsb,
            "tflm_vs_float": compare_outputs(floats, tflm_float).to_json(),
        }
        float_acc = None if labels is None else task_accuracy(stack_samples([f[0] for f in floats]), labels)
        if float_acc is not None:  # the one definition verify uses (quantize.metrics)
            entry["float_accuracy"] = _r(float_acc)
            entry["tflm_accuracy"] = _r(task_accuracy(stack_samples([t[0] for t in tflm_float]), labels))
            entry["source"] = evaluation.source if evaluation else None
        report[label] = entry
        measured = (kind, floats, tflm_float, labels)
    return report, measured


def layout_spec(spec, channels_last: bool) -> dict:
    """The artifact's input as it takes it: rank-4 float inputs NHWC when channels-last."""
    from tpuedge.edge.litert.channels_last import nhwc_shape

    entry = spec.to_json()
    if channels_last and len(spec.shape) == 4 and spec.dtype.startswith("float"):
        entry["shape"] = list(nhwc_shape(entry["shape"]))
    return entry
