"""A strided convolution over few input channels with a long kernel, written for XLA:TPU as the
same sums over a space-to-depth view of its input.

libtpu's compile time grows with the kernel's length when the input has one or a few channels:
measured on a deviceless v5e compile, a [1, 1, 1024] input against 128 filters of 512 taps at
stride 4 (torchcrepe's first layer) took 60 s, and 132 s in bf16; with the input folded by the
stride into 4 channels of 256 and 128 taps at stride 1 (the same products, summed in another
order) it took 5 s. An STFT written as a convolution (silero-vad: 256 taps at stride 128) is
the same shape. Only the TPU branch is rewritten (`lax.platform_dependent`): XLA:CPU and GPU
compile the convolution as it is, so the artifact's numbers there do not change.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

__all__ = ["folds_for_tpu", "space_to_depth_conv"]

_FEW_CHANNELS = 4  # raw waveforms: mono, stereo, a few microphones
_LONG_KERNEL = 16  # taps along one axis


def folds_for_tpu(weight_shape, stride, dilation, groups: int) -> tuple[bool, ...] | None:
    """Per spatial axis, whether to fold it (None: leave the convolution as it is): a strided
    axis whose kernel is long and a multiple of the stride, over few input channels."""
    channels, kernel = weight_shape[1], weight_shape[2:]
    if groups != 1 or channels > _FEW_CHANNELS or any(d != 1 for d in dilation):
        return None
    folds = tuple(s > 1 and k >= _LONG_KERNEL and k % s == 0 for k, s in zip(kernel, stride))
    return folds if any(folds) else None


def _fold(array, axis: int, factor: int, channel_axis: int = 1):
    """[..., L, ...] -> the axis split into (L // factor, factor), the factor axis moved after the channels."""
    shape = array.shape[:axis] + (array.shape[axis] // factor, factor) + array.shape[axis + 1 :]
    return jnp.moveaxis(array.reshape(shape), axis + 1, channel_axis + 1)


def space_to_depth_conv(x, weight, stride, padding, folds):
    """`lax.conv_general_dilated(x, weight, stride, padding)` (NC+spatial, OI+spatial, dilation 1,
    one group), each folded axis split by its stride into channels, so it runs at stride 1."""
    x = jnp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    # an axis of one element against one tap (a 1-D convolution written 2-D) only slows the compile
    unit = [i for i in range(weight.ndim - 2) if x.shape[2 + i] == 1 and weight.shape[2 + i] == 1 and not folds[i]]
    if unit:
        keep = [i for i in range(weight.ndim - 2) if i not in unit]
        out = space_to_depth_conv(
            jnp.squeeze(x, [2 + i for i in unit]),
            jnp.squeeze(weight, [2 + i for i in unit]),
            [stride[i] for i in keep],
            [0] * len(keep),
            [folds[i] for i in keep],
        )
        return jnp.expand_dims(out, [2 + i for i in unit])
    n = weight.ndim - 2
    strides = list(stride)
    extra = 0  # fold axes inserted after the channels so far
    for i in range(n):
        if not folds[i]:
            continue
        axis, s, k = 2 + extra + i, stride[i], weight.shape[2 + extra + i]
        outputs = (x.shape[axis] - k) // s + 1
        x = lax.slice_in_dim(x, 0, (outputs - 1) * s + k, axis=axis)  # a multiple of s: k is
        x, weight = _fold(x, axis, s, 1 + extra), _fold(weight, axis, s, 1 + extra)
        strides[i] = 1
        extra += 1
    folded = 1 + extra
    x = x.reshape(x.shape[:1] + (math.prod(x.shape[1 : folded + 1]),) + x.shape[folded + 1 :])
    weight = weight.reshape(weight.shape[:1] + (math.prod(weight.shape[1 : folded + 1]),) + weight.shape[folded + 1 :])
    sp = "DHW"[3 - n :]
    dims = lax.conv_dimension_numbers(x.shape, weight.shape, ("NC" + sp, "OI" + sp, "NC" + sp))
    return lax.conv_general_dilated(x, weight, window_strides=strides, padding=[(0, 0)] * n, dimension_numbers=dims)
