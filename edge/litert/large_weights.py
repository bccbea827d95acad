"""ai-edge-quantizer's per-channel quantization of weights over 32 MiB, made to work.

ai-edge-quantizer (0.x, as pinned) quantizes a tensor over 32 MiB in chunks of a 2-D view,
(-1, last axis), and broadcasts the scales onto that view: per-channel scales on any axis but
the last, (O, 1, 1, 1) for a convolution's weight, do not broadcast, and the whole quantization
stops with numpy's "input operand has more dimensions than allowed by the axis remapping" (a 2-D
Linear weight's (O, 1) does broadcast). Every int8 and dynamic-int8 android build of a model
with such a weight failed: FCN-ResNet50's 3x3x2048x512 head convolution, any convolution or
stacked table over 32 MiB. `sliced` wraps its `uniform_quantize` so that such a tensor is
quantized in slices along its quantized axis, each under the chunking size (or one channel, whose
single scale broadcasts), by ai-edge-quantizer's own function: the values are its, bit for bit,
as if the chunked path broadcast right. Other tensors go straight through. Installed only while a
build quantizes (edge/litert/quantizer_compat.py).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sliced", "CHUNKED_BYTES"]

CHUNKED_BYTES = 32 * 1024 * 1024  # the size above which ai-edge-quantizer takes its chunked path


def sliced(original):
    """`original` (ai-edge-quantizer's `uniform_quantize`), slicing the tensors it cannot take whole."""

    def uniform_quantize(tensor_data, quantization_params, is_blockwise_quant: bool = False):
        try:
            axis = _broken_axis(tensor_data, quantization_params, is_blockwise_quant)
        except (AttributeError, TypeError, ValueError):  # parameters of another form: its own path
            axis = None
        if axis is None:
            return original(tensor_data, quantization_params, is_blockwise_quant)
        import dataclasses

        channels = tensor_data.shape[axis]
        step = max(1, CHUNKED_BYTES // max(1, tensor_data.nbytes // channels))
        parts = []
        for start in range(0, channels, step):
            rows = np.arange(start, min(channels, start + step))
            params = dataclasses.replace(
                quantization_params,
                scale=_rows(quantization_params.scale, rows, axis, tensor_data.ndim),
                zero_point=_rows(quantization_params.zero_point, rows, axis, tensor_data.ndim),
            )
            parts.append(original(np.take(tensor_data, rows, axis=axis), params, is_blockwise_quant))
        return np.concatenate(parts, axis=axis)

    return uniform_quantize


def _rows(values, rows: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """The scales (or zero points) of `rows`: flat, or shaped like the tensor (taken on its axis)."""
    values = np.asarray(values)
    return np.take(values, rows, axis=axis) if values.ndim == ndim else values.reshape(-1)[rows]


def _broken_axis(tensor_data, quantization_params, is_blockwise_quant: bool) -> int | None:
    """The quantized axis of a tensor the chunked path cannot broadcast scales onto, else None."""
    if is_blockwise_quant or not isinstance(tensor_data, np.ndarray) or tensor_data.ndim < 3:
        return None  # a 2-D weight's (O, 1) scales broadcast onto the view: the library's path works
    if tensor_data.nbytes <= CHUNKED_BYTES or np.size(quantization_params.scale) <= 1:
        return None
    if np.size(quantization_params.zero_point) != np.size(quantization_params.scale):
        return None
    axis = quantization_params.quantized_dimension
    if axis is None or axis % tensor_data.ndim == tensor_data.ndim - 1:
        return None  # per-channel on the last axis broadcasts onto (-1, last)
    axis %= tensor_data.ndim
    if np.size(quantization_params.scale) != tensor_data.shape[axis]:
        return None
    return axis
