"""StepRunners over an mcu decoder's int8 decode step (one signature: the file TFLite-Micro runs).

    runner = TflmStepRunner(tflite, spec, arena_bytes)      # TFLite-Micro
    runner = LiteRTIntegerStepRunner(tflite, spec)          # LiteRT's reference kernels, the same bytes

The step's I/O is integer: tokens and input_pos int32, the KV caches and the logits int8. The
caches stay int8 between steps: each cache input has its output's scale and zero point (the
build ties them), so the host hands the raw output back as the next step's input, as firmware
does. A fresh cache is the int8 code of 0.0 (the zero point). Logits are dequantized for the
generation loop. The step has no prefill entry (`prefill_lengths = ()`): generation.py feeds
a prompt through decode one token at a time.
"""

from __future__ import annotations

import numpy as np

from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.generative.decoder import DECODE

__all__ = ["IntegerStepRunner", "TflmStepRunner", "LiteRTIntegerStepRunner", "decode_step_io", "zero_cache"]


def decode_step_io(tflite: bytes, spec) -> dict:
    """{"inputs": [...], "outputs": [...]} of the decode step (edge/tflm_model.io_quantization),
    checked: tokens, input_pos, then the caches in cache_names order, each cache output with its
    input's shape, dtype, scale and zero point; logits first among the outputs."""
    from tpuedge.edge.mcu.tflm_model import io_quantization

    io = io_quantization(tflite)
    names = ["tokens", "input_pos", *spec.cache_names]
    ins, outs = io["inputs"], io["outputs"]
    wrong = [
        f"input {i} is {t['name']}, not {want}"
        for i, (t, want) in enumerate(zip(ins, names))
        if not t["name"].endswith(want)
    ]
    wrong += [
        f"output {i} is {t['name']}, not {want}"
        for i, (t, want) in enumerate(zip(outs, ["logits", *spec.cache_names]))
        if not t["name"].endswith((want, want + "_output"))
    ]  # the converter names outputs "<name>_output"
    if len(ins) != len(names) or len(outs) != len(names) - 1 or wrong:
        raise InternalError(
            f"the decode step's I/O is not tokens, input_pos, the caches -> logits, the caches: {wrong or io}"
        )
    for cache_in, cache_out in zip(ins[2:], outs[1:]):
        keys = ("shape", "dtype", "scale", "zero_point")
        if cache_in["dtype"] != "int8" or any(cache_in[k] != cache_out[k] for k in keys):
            raise InternalError(
                f"cache {cache_in['name']} is not int8 with its output's scale and zero point "
                f"({[cache_in[k] for k in keys]} vs {[cache_out[k] for k in keys]})"
            )
    return io


def zero_cache(io: dict) -> list[np.ndarray]:
    """A fresh cache (all 0.0) as the step's int8 inputs: each cache's zero point."""
    return [np.full(t["shape"], t["zero_point"], np.int8) for t in io["inputs"][2:]]


class IntegerStepRunner:
    """The StepRunner of generation.py over `run_raw(inputs) -> outputs` on the step's own dtypes."""

    prefill_lengths: tuple[int, ...] = ()

    def __init__(self, tflite: bytes, spec, run_raw):
        self.spec = spec
        self.cache_length = spec.cache_length
        self.io = decode_step_io(tflite, spec)
        self._run_raw = run_raw
        logits = self.io["outputs"][0]
        self._logits = (logits["scale"], logits["zero_point"]) if logits["dtype"] == "int8" else None

    def initial_cache(self) -> list[np.ndarray]:
        return zero_cache(self.io)

    def raw_step(self, tokens, input_pos, cache) -> list[np.ndarray]:
        """The step's raw outputs: int8 logits, then the int8 caches."""
        return self._run_raw(
            [np.asarray(tokens, np.int32).reshape(1, 1), np.asarray(input_pos, np.int32).reshape(1), *cache]
        )

    def run(self, entry: str, tokens, input_pos, cache):
        return self.outputs(entry, tokens, self.raw_step(tokens, input_pos, cache))

    def outputs(self, entry: str, tokens, raw: list[np.ndarray]):
        """(logits float32 [1, 1, vocab], the int8 caches) from a step's raw outputs."""
        if entry != DECODE or np.asarray(tokens).size != 1:
            raise InternalError(
                f"an mcu decoder runs one token of `decode` a step, not {entry} of {np.asarray(tokens).size}"
            )
        logits, *new_cache = raw
        if self._logits is not None:
            scale, zero = self._logits
            logits = (logits.astype(np.float32) - zero) * np.float32(scale)
        return logits.astype(np.float32).reshape(1, 1, -1), new_cache


class TflmStepRunner(IntegerStepRunner):
    """The decode step in the TFLite-Micro host interpreter, in an arena of `arena_bytes`."""

    def __init__(self, tflite: bytes, spec, arena_bytes: int, *, source=None):
        from tpuedge.edge.mcu.tflm_runtime import TflmRunner

        self.interpreter = TflmRunner(tflite, arena_bytes, source=source)
        super().__init__(tflite, spec, self.interpreter.run_raw)


class LiteRTIntegerStepRunner(IntegerStepRunner):
    """The same decode step in the LiteRT interpreter with its reference kernels (BUILTIN_REF),
    of which TFLite-Micro's are ports: the runtime TFLite-Micro is held to. (LiteRT's default
    XNNPACK kernels requantize in float and round otherwise.)"""

    def __init__(self, tflite: bytes, spec):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        from tpuedge.edge.tool_output import held_tool_output

        self._bytes = bytes(tflite)  # the interpreter reads the model from these bytes: kept alive with it
        with held_tool_output("LiteRT"):
            self.interpreter = Interpreter(
                model_content=self._bytes, experimental_op_resolver_type=OpResolverType.BUILTIN_REF
            )
            self.interpreter.allocate_tensors()
        self._in, self._out = self.interpreter.get_input_details(), self.interpreter.get_output_details()
        super().__init__(tflite, spec, self._run_raw_litert)

    def _run_raw_litert(self, inputs):
        for detail, x in zip(self._in, inputs):
            self.interpreter.set_tensor(
                detail["index"], np.ascontiguousarray(x, detail["dtype"]).reshape(detail["shape"])
            )
        self.interpreter.invoke()
        return [np.array(self.interpreter.get_tensor(d["index"])) for d in self._out]
