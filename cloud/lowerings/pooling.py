"""Pooling: max, average and adaptive pooling in 1-3 spatial dims (torch's window geometry,
ceil_mode and padding rules, indices included)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tpuedge.cloud.lowerings.registry import jax_dtype, lowering

__all__: list[str] = []


# ---- pooling -------------------------------------------------------------------------------
def _tuple(v, n):
    v = [v] if isinstance(v, int) else list(v)
    return v * n if len(v) == 1 else v


def _pool_geometry(size, k, s, p, d, ceil_mode):
    """torch's output size and the extra right padding ceil_mode needs."""
    span = d * (k - 1) + 1
    num = size + 2 * p - span
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside
        out -= 1
    extra = max((out - 1) * s + span - (size + 2 * p), 0)
    return out, extra


def _window_config(x, n, kernel, stride, padding, dilation, ceil_mode):
    lead = x.ndim - n
    kernel = _tuple(kernel, n)
    stride = _tuple(stride, n) if stride else kernel
    padding, dilation = _tuple(padding, n), _tuple(dilation, n)
    pads, outs = [(0, 0)] * lead, []
    for size, k, s, p, d in zip(x.shape[lead:], kernel, stride, padding, dilation):
        out, extra = _pool_geometry(size, k, s, p, d, ceil_mode)
        pads.append((p, p + extra))
        outs.append(out)
    return (
        (1,) * lead + tuple(kernel),
        (1,) * lead + tuple(stride),
        tuple(pads),
        (1,) * lead + tuple(dilation),
        padding,
    )


def _max_pool(x, n, kernel, stride, padding, dilation, ceil_mode):
    """(values, torch's flat indices). One pass of compares and selects over the window's
    candidates: the first maximum wins (NaN counts as a maximum), as torch's. Not reduce_window
    max: jax's VJP of that (a variadic reduce-window over iotas) took a third of a small CNN's
    train step on XLA:CPU; here the gradient is selects plus the candidates' slice transposes."""
    window, strides, pads, dil, _ = _window_config(x, n, kernel, stride, padding, dilation, ceil_mode)
    low = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    candidates, positions = _pool_candidates(x, n, window, strides, pads, dil, low)
    floating = jnp.issubdtype(x.dtype, jnp.floating)
    values, index = candidates[0], jnp.broadcast_to(jnp.asarray(positions[0]), candidates[0].shape)
    for c, where in zip(candidates[1:], positions[1:]):
        better = c > values
        if floating:
            better = better | (jnp.isnan(c) & ~jnp.isnan(values))
        better = lax.stop_gradient(better)
        values = jnp.where(better, c, values)
        index = jnp.where(better, jnp.asarray(where), index)
    return values, index.astype(jax_dtype("torch.int64"))


def _pool_candidates(x, n, window, strides, pads, dil, low):
    """Each kernel offset's window values (a list of arrays shaped like the output) and, per
    offset, the flat index within the spatial plane that each output position reads (torch's
    indices; numpy, spatial dims only)."""
    lead = x.ndim - n
    padded = lax.pad(x, np.array(low, x.dtype), [(lo, hi, 0) for lo, hi in pads])
    out_shape = [
        (padded.shape[lead + i] - dil[lead + i] * (window[lead + i] - 1) - 1) // strides[lead + i] + 1 for i in range(n)
    ]
    tiled = (
        all(p == (0, 0) for p in pads)
        and all(d == 1 for d in dil)
        and tuple(strides) == tuple(window)
        and all(out_shape[i] * window[lead + i] == x.shape[lead + i] for i in range(n))
    )
    if tiled:  # windows tile the input: offsets are slices of one reshape (cheaper transposes)
        split = list(x.shape[:lead]) + [d for i in range(n) for d in (out_shape[i], window[lead + i])]
        tiles = x.reshape(split)
    candidates, positions = [], []
    for offset in np.ndindex(*window[lead:]):
        if tiled:
            c = tiles
            for i, o in reversed(list(enumerate(offset))):
                c = lax.index_in_dim(c, o, axis=lead + 2 * i + 1, keepdims=False)
            candidates.append(c)
        else:
            starts = [0] * lead + [o * d for o, d in zip(offset, dil[lead:])]
            limits = list(padded.shape[:lead]) + [
                st + (o - 1) * s + 1 for st, o, s in zip(starts[lead:], out_shape, strides[lead:])
            ]
            candidates.append(lax.slice(padded, starts, limits, strides))
        flat = 0
        for i in range(n):
            coord = np.arange(out_shape[i]) * strides[lead + i] + offset[i] * dil[lead + i] - pads[lead + i][0]
            flat = np.multiply.outer(flat * x.shape[lead + i], np.ones(out_shape[i], np.int64)) + coord
        positions.append(np.asarray(flat, np.int32))
    return candidates, positions


@lowering("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode)


@lowering("aten.max_pool3d_with_indices.default")
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode)


# Windows up to this many elements are summed as shifted slices, larger ones by reduce_window.
# libtpu's space-to-batch pass aborts the process (a CHECK failure, no error to catch) on a
# zero-padded reduce_window over a convolution's channels, which is how torch writes
# LocalResponseNorm (tests/test_cloud_pooling.py); XLA fuses the slices into one loop as well.
SLICED_WINDOW_LIMIT = 27


def _window_sums(x, n, window, strides, pads):
    """Sum over each pooling window of x's last n dims, zero padding included."""
    if int(np.prod(window)) <= SLICED_WINDOW_LIMIT:
        candidates, _ = _pool_candidates(x, n, window, strides, pads, (1,) * x.ndim, 0)
        total = candidates[0]
        for c in candidates[1:]:
            total = total + c
        return total
    return lax.reduce_window(x, np.array(0, x.dtype), lax.add, window, strides, pads)


def _window_counts(shape, n, window, strides, pads, sym_pad, count_include_pad) -> np.ndarray:
    """How many elements torch divides each window's sum by (numpy: the geometry is static)."""
    lead = len(shape) - n
    if count_include_pad:  # padded zeros count, ceil_mode's extra right part does not
        ones = np.ones([s + 2 * p for s, p in zip(shape[lead:], sym_pad)], np.float64)
        pads = [(0, hi - p) for (lo, hi), p in zip(pads[lead:], sym_pad)]
    else:
        ones = np.ones(shape[lead:], np.float64)
        pads = list(pads[lead:])
    padded = np.pad(ones, pads)
    out = [(padded.shape[i] - window[lead + i]) // strides[lead + i] + 1 for i in range(n)]
    counts = np.zeros(out)
    for offset in np.ndindex(*window[lead:]):
        counts += padded[tuple(slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offset, out, strides[lead:]))]
    return counts


def _avg_pool(x, n, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    window, strides, pads, _, sym_pad = _window_config(x, n, kernel, stride, padding, 1, ceil_mode)
    total = _window_sums(x, n, window, strides, pads)
    if divisor_override:
        return total / divisor_override
    counts = _window_counts(x.shape, n, window, strides, pads, sym_pad, count_include_pad)
    return total / jnp.asarray(counts, x.dtype)


@lowering("aten.avg_pool2d.default")
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@lowering("aten.avg_pool3d.default")
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@lowering("aten.avg_pool1d.default")
def avg_pool1d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def _adaptive_matrix(size, out):
    """(out, size) averaging matrix with torch's bins [floor(i*size/out), ceil((i+1)*size/out))."""
    m = np.zeros((out, size), np.float32)
    for i in range(out):
        lo, hi = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def _adaptive_avg(x, output_size):
    n = len(output_size)
    for axis, out in zip(range(x.ndim - n, x.ndim), output_size):
        size = x.shape[axis]
        if out == size:
            continue
        if out == 1:
            x = jnp.mean(x, axis=axis, keepdims=True)
        elif size % out == 0:
            shape = x.shape[:axis] + (out, size // out) + x.shape[axis + 1 :]
            x = jnp.mean(x.reshape(shape), axis=axis + 1)
        else:
            m = jnp.asarray(_adaptive_matrix(size, out), x.dtype)
            x = jnp.moveaxis(jnp.tensordot(x, m, axes=([axis], [1])), -1, axis)
    return x


@lowering("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg(x, list(output_size))


@lowering("aten.adaptive_avg_pool1d.default")
def adaptive_avg_pool1d(x, output_size):
    return _adaptive_avg(x, list(output_size))


@lowering("aten._adaptive_avg_pool3d.default")
def adaptive_avg_pool3d(x, output_size):
    return _adaptive_avg(x, list(output_size))


@lowering("aten.adaptive_max_pool2d.default")
def adaptive_max_pool2d(x, output_size):
    """-> (values, flat plane indices); each output cell is one small static window."""
    (h, w), (oh, ow) = x.shape[-2:], output_size
    rows, idx_rows = [], []
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        cols, idx_cols = [], []
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            cell = x[..., h0:h1, w0:w1].reshape(x.shape[:-2] + (-1,))
            arg = jnp.argmax(cell, axis=-1)
            cols.append(jnp.max(cell, axis=-1))
            idx_cols.append((h0 + arg // (w1 - w0)) * w + w0 + arg % (w1 - w0))
        rows.append(jnp.stack(cols, -1))
        idx_rows.append(jnp.stack(idx_cols, -1))
    return jnp.stack(rows, -2), jnp.stack(idx_rows, -2).astype(jax_dtype("torch.int64"))
