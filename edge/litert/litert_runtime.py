"""`LiteRTRunner`: run .tflite bytes in the real LiteRT interpreter (ai_edge_litert).

STABLE INTERNAL API (used by the android artifact, the builds' accuracy check, the mcu target
and the benchmark):

    runner = LiteRTRunner(tflite_bytes, num_threads=1)
    outputs = runner.run([x])        # float in, float out: int8/int16 I/O is quantized and
                                     # dequantized with each tensor's own scale / zero point
    raw = runner.run_raw([x_int8])   # exact tensors in the model's own I/O dtypes
    runner.inputs / runner.outputs   # TensorInfo(name, shape, dtype, scale, zero_point)
    outputs = run_samples(tflite_bytes, samples)  # many samples, on every CPU (accuracy runs)

Inputs are given in the model's input order (the Program's input order).

`preserving_interpreter(tflite_bytes)`: a bare LiteRT interpreter whose intermediate tensors
stay readable after `invoke` (per-layer verify, the activation histograms of the int8 search).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tpuedge.edge.flatbuffer.tflite_inspect import TensorInfo
from tpuedge.edge.tool_output import held_tool_output, tail
from tpuedge.quantize import affine
from tpuedge.shared_ir.errors import BudgetError, InternalError, UserError

__all__ = [
    "LiteRTRunner",
    "ModelRunError",
    "aborting_op",
    "preserving_interpreter",
    "refused_by_litert",
    "refused_on_budget_samples",
    "run_samples",
]


class ModelRunError(InternalError):
    """LiteRT loaded a model and then refused to run it: a kernel's own check failed on the
    values it met (an int8 DIV whose divisor rounds to its zero point). The int8 search counts
    such a candidate as failed; anywhere else it is a model tpuedge should not have built."""


def refused_on_budget_samples(name: str, model: str, kind: str, exc: ModelRunError, remedy: str) -> BudgetError:
    """The error (exit 1, nothing written) for a build whose `model` ("android int8", "mcu int8")
    LiteRT refused on the samples its budget is measured on (`kind`); `remedy` says what to try."""
    return BudgetError(
        f"{name}: the {model} model stops LiteRT on the samples its budget is measured on ({kind}): "
        f"{str(exc).rstrip('.')}. An int8 kernel refused its values (a DIV whose divisor rounds to its zero point). "
        f"Nothing was written and the output folder is as it was. {remedy}"
    )


def refused_by_litert(name: str, model: str, exc: ModelRunError) -> UserError:
    """The error (exit 2, nothing written) for a model with float activations ("android none",
    "android fp16", "android dynamic-int8") that LiteRT will not run: no int8 kernel's values
    are at stake, so no calibration data helps; LiteRT's error names the node."""
    return UserError(
        f"{name}: LiteRT can't run the {model} model: {str(exc).rstrip('.')}. The check passed the model's ops, "
        "but LiteRT's kernels refuse one of them in the form the converter wrote. Nothing was written and the "
        "output folder is as it was. Try: rewrite the layer that node comes from (TPUEDGE_VERBOSE=1 shows the "
        "converter's log), or report it, so the check learns this case."
    )


def preserving_interpreter(tflite_bytes: bytes):
    """An allocated LiteRT interpreter over `tflite_bytes` that keeps every intermediate tensor
    (reference kernels, one thread, no delegate: a delegated partition keeps none of its own).
    The caller keeps `tflite_bytes` alive while it uses the interpreter."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    with held_tool_output("LiteRT"), warnings.catch_warnings():
        # LiteRT warns that preserving every tensor is for debugging: keeping them is the point
        warnings.filterwarnings("ignore", message=".*preserve_all_tensors.*")
        interpreter = Interpreter(
            model_content=tflite_bytes,
            experimental_preserve_all_tensors=True,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            num_threads=1,
        )
        aborting = aborting_op(tflite_bytes)
        if aborting:
            raise ModelRunError(f"LiteRT can't run this model: {aborting}")
        interpreter.allocate_tensors()
    return interpreter


def _said(exc: BaseException) -> str:
    """The error and the last lines LiteRT printed while it raised it."""
    printed = tail(getattr(exc, "tool_output", ""), 5)
    return f"{exc}" + (f"; it printed: {' | '.join(printed.splitlines())}" if printed else "")


def _to_model(x: np.ndarray, info: TensorInfo) -> np.ndarray:
    """Float -> the input tensor's dtype; LiteRT's default kernels round ties to even."""
    if not info.quantized or np.issubdtype(np.dtype(info.dtype), np.floating):
        return np.asarray(x).astype(info.dtype)
    return affine.quantize(x, info.scale, info.zero_point, info.dtype, ties="even")


def _from_model(q: np.ndarray, info: TensorInfo) -> np.ndarray:
    if not info.quantized or np.issubdtype(q.dtype, np.floating):
        return np.asarray(q, np.float32) if np.issubdtype(q.dtype, np.floating) else q
    return affine.dequantize(q, info.scale, info.zero_point)


def _info(detail: dict, name: str) -> TensorInfo:
    qp = detail.get("quantization_parameters") or {}
    scales = tuple(float(s) for s in qp.get("scales", ()))
    zps = tuple(int(z) for z in qp.get("zero_points", ()))
    return TensorInfo(
        name, tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"]).name, scales, zps[: len(scales)]
    )


# LiteRT's integer ADD and SUB shift their inputs left by this many bits before rescaling
_ADD_LEFT_SHIFT = {"int8": 20, "int16": 15}


def aborting_op(tflite_bytes: bytes) -> str | None:
    """The op LiteRT would abort the whole process on while preparing it, or None. Its integer
    ADD and SUB rescale by input_scale / (2 max input scale) and (2 max input scale) / (2**shift *
    output_scale), each of which must lie in (0, 1) (TFLITE_CHECK, SIGABRT): an int8 ADD whose
    input range is 2**19 times its output's fails it. A float32.min attention mask folded into a
    constant did (HF BLOOM, scale 1.3e36 against 0.004); an abort leaves no message and no
    process to report it, so the model is refused before it is loaded."""
    from tpuedge.edge.flatbuffer import tflite_file

    for index, name, dtype, ins, outs in tflite_file.op_scales(tflite_bytes, frozenset({"ADD", "SUB"})):
        shift = _ADD_LEFT_SHIFT.get(dtype)
        if shift is None or len(ins) < 2 or None in (ins[0], ins[1], outs[0] if outs else None):
            continue
        twice = 2 * max(ins[0], ins[1])
        output = twice / ((1 << shift) * outs[0]) if outs[0] > 0 else float("inf")
        if not (twice > 0 and 0 < ins[0] / twice < 1 and 0 < ins[1] / twice < 1 and 0 < output < 1):
            return (
                f"{dtype} {name} (op {index}) with input scales {ins[0]:.3g}, {ins[1]:.3g} and output scale "
                f"{outs[0]:.3g}: its rescale factor {output:.3g} is outside (0, 1), which LiteRT aborts on"
            )
    return None


class LiteRTRunner:
    """One LiteRT interpreter over `tflite_bytes` (XNNPACK on CPU, `num_threads` threads)."""

    def __init__(self, tflite_bytes: bytes, *, num_threads: int = 1):
        from ai_edge_litert.interpreter import Interpreter

        self._bytes = bytes(tflite_bytes)  # the interpreter reads from this buffer: keep it alive
        try:
            # LiteRT logs "Created TensorFlow Lite XNNPACK delegate" (once per process) when it
            # allocates: held like every tool's output, shown with TPUEDGE_VERBOSE=1 or on failure
            with held_tool_output("LiteRT"):
                self._interp = Interpreter(model_content=self._bytes, num_threads=num_threads)
        except (RuntimeError, ValueError) as exc:  # not a model LiteRT can read
            raise UserError(
                f"LiteRT could not load this model ({_said(exc)}); rebuild it with `tpuedge build`."
            ) from exc
        aborting = aborting_op(self._bytes)  # read once LiteRT has verified the flatbuffer
        if aborting:
            raise ModelRunError(f"LiteRT can't run this model: {aborting}")
        try:
            with held_tool_output("LiteRT"):
                self._interp.allocate_tensors()
        except RuntimeError as exc:
            # a model it reads and a kernel refuses when it prepares it (a 16x8 DEPTHWISE_CONV_2D
            # over activations calibrated to ~1e-9: "no_integer_overflow_from_quantization"): for
            # the int8 search a candidate that failed to run, not a file to rebuild
            raise ModelRunError(f"LiteRT refused to prepare this model ({_said(exc)})") from exc
        sig = self._interp._get_full_signature_list() or {}
        in_names, out_names = {}, {}
        for spec in sig.values():
            in_names.update({idx: name for name, idx in spec.get("inputs", {}).items()})
            out_names.update({idx: name for name, idx in spec.get("outputs", {}).items()})
        self._in = self._interp.get_input_details()
        self._out = self._interp.get_output_details()
        self.inputs = [_info(d, in_names.get(d["index"], d["name"])) for d in self._in]
        self.outputs = [_info(d, out_names.get(d["index"], d["name"])) for d in self._out]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def _check(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise UserError(
                f"This LiteRT model takes {len(self.inputs)} input(s) "
                f"({', '.join(t.describe() for t in self.inputs)}) but got {len(inputs)}; pass one array per input."
            )
        arrays = []
        for info, x in zip(self.inputs, inputs):
            x = np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x)
            if tuple(x.shape) != info.shape:
                raise UserError(
                    f"Input {info.name!r} has shape {list(x.shape)} but the LiteRT model expects {list(info.shape)}; "
                    "feed arrays of the shape the model was built for."
                )
            arrays.append(x)
        return arrays

    def run_raw(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Tensors in the model's own I/O dtypes (int8 I/O in and out, no (de)quantization)."""
        for detail, info, x in zip(self._in, self.inputs, self._check(inputs)):
            want = np.dtype(info.dtype)
            if x.dtype != want:
                if np.issubdtype(want, np.integer) and info.quantized and not np.issubdtype(x.dtype, np.integer):
                    raise UserError(
                        f"Input {info.name!r} is {info.dtype} (scale {info.scale[0]:.6g}, zero point "
                        f"{info.zero_point[0]}); run_raw takes it quantized. Use run() to pass floats."
                    )
                x = x.astype(want)
            self._interp.set_tensor(detail["index"], np.ascontiguousarray(x))
        try:
            self._interp.invoke()
        except RuntimeError as exc:
            raise ModelRunError(f"LiteRT stopped running the model: {' '.join(str(exc).split())}") from exc
        return [np.array(self._interp.get_tensor(d["index"])) for d in self._out]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Float in, float out; quantized I/O uses each tensor's scale and zero point."""
        arrays = self._check(inputs)
        raw = self.run_raw([_to_model(x, info) for x, info in zip(arrays, self.inputs)])
        return [_from_model(q, info) for q, info in zip(raw, self.outputs)]


# interpreters an accuracy run spreads its samples over, at most: each holds its own arena
# (a float island's dequantized weights among it), so more than a few costs memory for little
_MAX_WORKERS = 4


def _workers(samples: int) -> int:
    """How many interpreters `run_samples` uses for `samples` samples on this machine."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, _MAX_WORKERS, samples))


def run_samples(
    tflite_bytes: bytes, samples: Sequence[Sequence[np.ndarray]], *, workers: int | None = None
) -> list[list[np.ndarray]]:
    """`LiteRTRunner.run` on each sample, in order, spread over `workers` interpreters on threads
    (default: one per CPU this process may use, at most _MAX_WORKERS). LiteRT lets go of the GIL while it invokes and each sample runs
    alone, so the outputs are the ones a single interpreter gives, and an int8 candidate with
    int16 activations (reference kernels, one core each) is measured in half the time on two
    cores. For accuracy runs: latency is timed on one thread (litert_latency.py). Raises
    ModelRunError as `run` does."""
    workers = workers or _workers(len(samples))
    if workers <= 1:
        runner = LiteRTRunner(tflite_bytes)
        return [runner.run(s) for s in samples]
    runners = [LiteRTRunner(tflite_bytes) for _ in range(workers)]
    with ThreadPoolExecutor(workers) as pool:  # worker k runs samples k, k + workers, ...
        shares = list(pool.map(lambda k: [runners[k].run(s) for s in samples[k::workers]], range(workers)))
    return [shares[i % workers][i // workers] for i in range(len(samples))]
