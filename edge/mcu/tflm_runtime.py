"""The TFLite-Micro interpreter on the host (`tflite_micro`), with float and raw int8 I/O.

TFLM reports allocation and kernel errors on the C stderr before raising; `held_native_stderr`
keeps those lines out of the console while we probe (arena sizes, op checks) and hands
them back so the real reason can go into an error message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tpuedge.edge.flatbuffer import tflite_file
from tpuedge.quantize import affine
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.native_stderr import held_native_stderr

__all__ = ["TflmRunner", "TflmError"]

_ALLOCATED = re.compile(r"Arena allocation total (\d+) bytes")


class TflmError(RuntimeError):
    """TFLite-Micro refused the model or the arena; `log` holds what it printed."""

    def __init__(self, message: str, log: str):
        super().__init__(f"{message}: {log.strip()}" if log.strip() else message)
        self.message, self.log = message, log


def _to_model(x: np.ndarray, detail: dict) -> np.ndarray:
    """Float -> the input tensor's dtype; TFLite-Micro's kernels round ties away from zero."""
    dtype = np.dtype(detail["dtype"])
    q = detail["quantization_parameters"]
    if not np.issubdtype(dtype, np.integer) or not len(q["scales"]):
        return np.asarray(x, dtype)
    return affine.quantize(x, q["scales"], q["zero_points"], dtype, ties="away")


def _from_model(y: np.ndarray, detail: dict) -> np.ndarray:
    q = detail["quantization_parameters"]
    if not np.issubdtype(np.dtype(detail["dtype"]), np.integer) or not len(q["scales"]):
        return np.asarray(y, np.float32)
    return affine.dequantize(y, q["scales"], q["zero_points"])


class TflmRunner:
    """One TFLite-Micro interpreter over `tflite` bytes with a fixed tensor arena."""

    def __init__(self, tflite: bytes, arena_size: int, *, source: str | Path | None = None, checked: bool = False):
        from tflite_micro import runtime

        # TFLM's Python loader decodes the flatbuffer with no bounds checks (a truncated file is a
        # struct.error): check it first, naming `source`, unless the caller has (`checked`: the
        # arena probe opens one model a dozen times; Resemblyzer's check takes 0.66 s)
        if not checked:
            tflite_file.read_model(tflite, source)
        self.arena_size = int(arena_size)
        with held_native_stderr() as log:
            try:
                self._it = runtime.Interpreter.from_bytes(bytes(tflite), arena_size=self.arena_size)
                error = None
            except Exception as exc:  # TFLM raises RuntimeError/ValueError with a short text
                error = exc
        if error is not None:
            raise TflmError(f"TFLite-Micro could not load the model ({error})", log[0])
        with held_native_stderr():  # probing past the last index prints "out of range"
            self.input_details = [self._it.get_input_details(i) for i in range(self._count("input"))]
            self.output_details = [self._it.get_output_details(i) for i in range(self._count("output"))]

    def _count(self, kind: str) -> int:
        n = 0
        while True:
            try:
                getattr(self._it, f"get_{kind}_details")(n)
            except Exception:
                return n
            n += 1

    def run_raw(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Inputs already in the tensors' dtypes (int8 for an int8-I/O model); raw outputs."""
        if len(inputs) != len(self.input_details):
            raise UserError(f"The TFLite-Micro model takes {len(self.input_details)} input(s), got {len(inputs)}.")
        with held_native_stderr() as log:
            try:
                for i, (x, d) in enumerate(zip(inputs, self.input_details)):
                    self._it.set_input(np.ascontiguousarray(x, dtype=d["dtype"]).reshape(d["shape"]), i)
                self._it.invoke()
                error = None
            except Exception as exc:
                error = exc
        if error is not None:
            raise TflmError(f"TFLite-Micro failed to run the model ({error})", log[0])
        return [np.array(self._it.get_output(i)) for i in range(len(self.output_details))]

    def allocated_bytes(self) -> int | None:
        """What TFLM's allocator took of the arena (its recorded total: head and tail), after a
        run; None where the interpreter does not say."""
        with held_native_stderr() as log:
            self._it.print_allocations()
        found = _ALLOCATED.search(log[0])
        return int(found.group(1)) if found else None

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Float in, float out: int8 I/O is (de)quantized with each tensor's scale and zero point."""
        raw = self.run_raw([_to_model(x, d) for x, d in zip(inputs, self.input_details)])
        return [_from_model(y, d) for y, d in zip(raw, self.output_details)]
