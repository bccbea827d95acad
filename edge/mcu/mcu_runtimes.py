"""One int8 model in both runtimes the mcu build compares: TFLite-Micro and LiteRT."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["McuRuntimes"]


class McuRuntimes:
    """The same model bytes in TFLM and LiteRT, with the model's own I/O (de)quantization."""

    def __init__(self, tflite: bytes, channels_last: bool):
        from tpuedge.edge.litert.litert_runtime import LiteRTRunner

        self.tflite = tflite
        self.channels_last = channels_last
        self.litert = LiteRTRunner(tflite)
        self.tflm = None

    def open_tflm(self, arena_bytes: int) -> None:
        from tpuedge.edge.mcu.tflm_runtime import TflmRunner

        self.tflm = TflmRunner(self.tflite, arena_bytes)

    def _details(self, which: str) -> list[dict]:
        from tpuedge.edge.mcu.tflm_model import io_quantization

        if not hasattr(self, "_io"):
            self._io = io_quantization(self.tflite)
        return self._io[which]

    def quantized(self, sample: Sequence[np.ndarray]) -> list[np.ndarray]:
        """A Program-layout (NCHW) sample as the model's input tensors (NHWC when channels-last)."""
        from tpuedge.edge.litert.float_model import tflite_layout_inputs
        from tpuedge.quantize import affine

        out = []
        for x, d in zip(
            tflite_layout_inputs([np.asarray(a) for a in sample], self.channels_last), self._details("inputs")
        ):
            x = np.asarray(x).reshape(d["shape"])
            if d["scale"] is None or d["dtype"] not in ("int8", "int16"):
                out.append(x.astype(d["dtype"]))
                continue
            out.append(affine.quantize(x, d["scale"], d["zero_point"], d["dtype"], ties="away"))  # as TFLM rounds
        return out

    def dequantized(self, outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        from tpuedge.quantize import affine

        res = []
        for y, d in zip(outputs, self._details("outputs")):
            if d["scale"] is None or d["dtype"] not in ("int8", "int16"):
                res.append(np.asarray(y, np.float32))
            else:
                res.append(affine.dequantize(y, d["scale"], d["zero_point"]))
        return res
