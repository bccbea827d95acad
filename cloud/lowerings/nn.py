"""Layers: matmul, convolution (grouped, depthwise, transposed), normalization, resampling,
pairwise distances (pooling is in pooling.py)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tpuedge.cloud.lowerings.registry import lowering
from tpuedge.cloud.lowerings.tpu_conv import folds_for_tpu, space_to_depth_conv

__all__: list[str] = []


# ---- matmul --------------------------------------------------------------------------------
@lowering("aten.mm.default")
def mm(a, b):
    return jnp.matmul(a, b)


@lowering("aten.bmm.default")
def bmm(a, b):
    return jnp.matmul(a, b)


@lowering("aten.addmm.default")
def addmm(bias, a, b, beta=1, alpha=1):
    product = jnp.matmul(a, b)
    if alpha != 1:
        product = product * alpha
    if beta == 0:  # torch ignores bias (even NaN) when beta == 0
        return product
    return product + (bias if beta == 1 else bias * beta)


@lowering("aten.baddbmm.default")
def baddbmm(bias, a, b, beta=1, alpha=1):
    return addmm(bias, a, b, beta, alpha)


# ---- convolution ---------------------------------------------------------------------------
def _spatial_names(n):
    return "DHW"[3 - n :] if n <= 3 else None


@lowering("aten.convolution.default")
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    n = weight.ndim - 2
    unbatched = x.ndim == n + 1
    if unbatched:
        x = x[None]
    sp = _spatial_names(n)
    dims = lax.conv_dimension_numbers(x.shape, weight.shape, ("NC" + sp, "OI" + sp, "NC" + sp))
    stride, padding, dilation = (list(v) * n if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    if not transposed:

        def as_written(x, weight):
            return lax.conv_general_dilated(
                x,
                weight,
                window_strides=stride,
                padding=[(p, p) for p in padding],
                rhs_dilation=dilation,
                dimension_numbers=dims,
                feature_group_count=groups,
            )

        folds = folds_for_tpu(weight.shape, stride, dilation, groups)
        if folds is None:
            out = as_written(x, weight)
        else:  # libtpu compiles a long kernel over few channels slowly (tpu_conv.py); other platforms keep it
            out = lax.platform_dependent(
                x, weight, tpu=lambda x, w: space_to_depth_conv(x, w, stride, padding, folds), default=as_written
            )
    else:
        # torch weight (C_in, C_out/g, k...) -> a forward conv over the stride-dilated input with
        # the kernel flipped and (C_out, C_in/g, k...) per group
        output_padding = list(output_padding) * n if len(output_padding) == 1 else list(output_padding)
        c_in, c_out_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
        w = weight.reshape((groups, c_in // groups, c_out_g) + kernel)
        w = jnp.swapaxes(w, 1, 2).reshape((groups * c_out_g, c_in // groups) + kernel)
        w = jnp.flip(w, axis=tuple(range(2, 2 + n)))
        pads = [
            (d * (k - 1) - p, d * (k - 1) - p + op) for k, p, d, op in zip(kernel, padding, dilation, output_padding)
        ]
        dims = lax.conv_dimension_numbers(x.shape, w.shape, ("NC" + sp, "OI" + sp, "NC" + sp))
        out = lax.conv_general_dilated(
            x,
            w,
            window_strides=[1] * n,
            padding=pads,
            lhs_dilation=stride,
            rhs_dilation=dilation,
            dimension_numbers=dims,
            feature_group_count=groups,
        )
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * n)
    return out[0] if unbatched else out


# ---- normalization -------------------------------------------------------------------------
def _bn_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _affine(y, x, weight, bias):
    if weight is not None:
        y = y * weight.reshape(_bn_shape(x))
    if bias is not None:
        y = y + bias.reshape(_bn_shape(x))
    return y


def _batch_stats(x):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - mean.reshape(_bn_shape(x))), axis=axes)  # biased, two-pass
    return mean, var, math.prod(x.shape[a] for a in axes)


def _opmath(x):
    """bf16/f16 input computed in f32 and rounded once, as torch's batch-norm kernels do
    (statistics of a bf16 batch taken in bf16 are off by ~1e-2)."""
    return x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16) else x


def _bn_train(x, weight, bias, eps):
    xf = _opmath(x)
    mean, var, count = _batch_stats(xf)
    rstd = lax.rsqrt(var + eps)
    y = _bn_normalized(xf, eps)
    return _affine(y, xf, weight, bias).astype(x.dtype), mean, var, rstd, count


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _bn_normalized(x, eps):
    """(x - batch mean) / sqrt(batch var + eps) over all axes but 1, with the closed-form
    gradient (two reductions) instead of autodiff through both statistics' passes."""
    mean, var, _ = _batch_stats(x)
    return (x - mean.reshape(_bn_shape(x))) * lax.rsqrt(var + eps).reshape(_bn_shape(x))


def _bn_normalized_fwd(x, eps):
    mean, var, _ = _batch_stats(x)
    rstd = lax.rsqrt(var + eps)
    x_hat = (x - mean.reshape(_bn_shape(x))) * rstd.reshape(_bn_shape(x))
    return x_hat, (x_hat, rstd)


def _bn_normalized_bwd(eps, residuals, g):
    x_hat, rstd = residuals
    axes = (0,) + tuple(range(2, x_hat.ndim))
    g_mean = jnp.mean(g, axis=axes, keepdims=True)
    gx_mean = jnp.mean(g * x_hat, axis=axes, keepdims=True)
    return ((g - g_mean - x_hat * gx_mean) * rstd.reshape(_bn_shape(x_hat)),)


_bn_normalized.defvjp(_bn_normalized_fwd, _bn_normalized_bwd)


def _running(running_mean, running_var, mean, var, count, momentum):
    unbiased = var * (count / max(count - 1, 1))
    new_mean = (1 - momentum) * running_mean + momentum * mean
    new_var = (1 - momentum) * running_var + momentum * unbiased
    return new_mean.astype(running_mean.dtype), new_var.astype(running_var.dtype)


def _bn_eval(x, weight, bias, running_mean, running_var, eps):
    xf = _opmath(x)
    rstd = lax.rsqrt(running_var + eps)
    y = (xf - running_mean.reshape(_bn_shape(xf))) * rstd.reshape(_bn_shape(xf))
    return _affine(y, xf, weight, bias).astype(x.dtype)


@lowering("aten._native_batch_norm_legit_functional.default")
def batch_norm_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """-> (out, save_mean, save_rstd, new_running_mean, new_running_var)."""
    if not training:
        out = _bn_eval(x, weight, bias, running_mean, running_var, eps)
        empty = jnp.zeros((0,), x.dtype)
        return out, empty, empty, running_mean, running_var
    out, mean, var, rstd, count = _bn_train(x, weight, bias, eps)
    new_mean, new_var = _running(running_mean, running_var, mean, var, count, momentum)
    return out, mean, rstd, new_mean, new_var


@lowering("aten._native_batch_norm_legit.default")
def batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Mutating form (running stats updated in place in torch): only the first three outputs
    exist here, so the interpreter only meets it in graphs that were not functionalized."""
    out, save_mean, save_rstd, _, _ = batch_norm_functional(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    return out, save_mean, save_rstd


@lowering("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    out, mean, _, rstd, _ = _bn_train(x, weight, bias, eps)
    return out, mean, rstd


@lowering("aten._native_batch_norm_legit_no_training.default")
def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    empty = jnp.zeros((0,), x.dtype)
    return _bn_eval(x, weight, bias, running_mean, running_var, eps), empty, empty


@lowering("aten.native_layer_norm.default")
def layer_norm(x, normalized_shape, weight, bias, eps):
    """-> (out, mean, rstd); mean/rstd keep the normalized dims as size 1, as torch."""
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


@lowering("aten.native_group_norm.default")
def group_norm(x, weight, bias, n, c, hxw, group, eps):
    """-> (out, mean (N, G), rstd (N, G))."""
    grouped = x.reshape(n, group, -1)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(grouped - mean), axis=-1, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = ((grouped - mean) * rstd).reshape(x.shape)
    return _affine(y, x, weight, bias), mean[..., 0], rstd[..., 0]


# ---- resampling ----------------------------------------------------------------------------
def _out_sizes(x, n, output_size, scale_factors):
    spatial = x.shape[-n:]
    if output_size:
        sizes = list(output_size)
        scales = [s / o for s, o in zip(spatial, sizes)]
    else:
        sizes = [int(math.floor(s * f)) for s, f in zip(spatial, scale_factors)]
        scales = [1.0 / f for f in scale_factors]  # torch maps with the given factor
    return sizes, scales


@lowering("aten.upsample_nearest2d.vec")
def upsample_nearest2d(x, output_size, scale_factors):
    sizes, scales = _out_sizes(x, 2, output_size, scale_factors)
    for axis, size, out, scale in zip((x.ndim - 2, x.ndim - 1), x.shape[-2:], sizes, scales):
        src = np.minimum(np.floor(np.arange(out, dtype=np.float32) * np.float32(scale)).astype(np.int64), size - 1)
        x = jnp.take(x, jnp.asarray(src.astype(np.int32)), axis=axis)
    return x


@lowering("aten.upsample_bilinear2d.vec")
def upsample_bilinear2d(x, output_size, align_corners, scale_factors):
    sizes, scales = _out_sizes(x, 2, output_size, scale_factors)
    for axis, size, out, scale in zip((x.ndim - 2, x.ndim - 1), x.shape[-2:], sizes, scales):
        dst = np.arange(out, dtype=np.float32)
        if align_corners:
            src = dst * (np.float32((size - 1) / (out - 1)) if out > 1 else np.float32(0))
        else:
            src = np.maximum((dst + np.float32(0.5)) * np.float32(scale) - np.float32(0.5), 0)
        i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
        i1 = np.minimum(i0 + 1, size - 1)
        lam = (src - i0).astype(np.float32)
        shape = [1] * x.ndim
        shape[axis] = out
        lam = jnp.asarray(lam.reshape(shape), x.dtype)
        a = jnp.take(x, jnp.asarray(i0.astype(np.int32)), axis=axis)
        b = jnp.take(x, jnp.asarray(i1.astype(np.int32)), axis=axis)
        x = a * (1 - lam) + b * lam
    return x


# ---- distances -----------------------------------------------------------------------------
def _pnorm(diff, p):
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum(a != 0, axis=-1).astype(diff.dtype)
    if p == float("inf"):
        return jnp.max(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(diff * diff, axis=-1))
    return jnp.sum(a**p, axis=-1) ** (1.0 / p)


@lowering("aten._cdist_forward.default")
def cdist(x1, x2, p, compute_mode=None):
    return _pnorm(x1[..., :, None, :] - x2[..., None, :, :], p)


@lowering("aten._pdist_forward.default")
def pdist(x, p=2):
    i, j = np.triu_indices(x.shape[0], k=1)
    return _pnorm(x[i] - x[j], p)


# ---- grid sampling (spatial transformers, flow warping) ------------------------------------
def _source_coordinate(g, size: int, align_corners: bool, padding_mode: int):
    """torch's grid_sampler_compute_source_index: [-1, 1] -> pixel coordinates, then the border
    (1) or reflection (2) padding's clamp; zeros padding (0) masks out-of-range taps later."""
    x = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    if padding_mode == 2:  # reflect about the edge pixels' centres (align_corners) or their outer edges
        low, high = (0.0, 2.0 * (size - 1)) if align_corners else (-1.0, 2.0 * size - 1)
        if high == low:
            x = jnp.zeros_like(x)
        else:
            span = (high - low) / 2
            distance = jnp.abs(x - low / 2)
            flips, extra = jnp.floor(distance / span), jnp.mod(distance, span)
            x = jnp.where(jnp.mod(flips, 2) == 0, extra + low / 2, span - extra + low / 2)
    if padding_mode in (1, 2):
        x = jnp.clip(x, 0, size - 1)
    return x


def _taps(x, ys, xs):
    """x (N, C, H, W) read at integer (ys, xs) (N, Ho, Wo): (N, C, Ho, Wo), 0 outside the image."""
    h, w = x.shape[-2:]
    inside = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h)
    yc, xc = jnp.clip(ys, 0, h - 1).astype(jnp.int32), jnp.clip(xs, 0, w - 1).astype(jnp.int32)
    values = jax.vmap(lambda image, yy, xx: image[:, yy, xx])(x, yc, xc)
    return values * inside[:, None].astype(x.dtype)


@lowering("aten.grid_sampler_2d.default")
def grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    if interpolation_mode not in (0, 1):
        from tpuedge.shared_ir.errors import UserError

        raise UserError(
            "cloud-tpu's grid_sample takes mode='bilinear' or 'nearest'; bicubic has no lowering. "
            "Use one of those two in F.grid_sample."
        )
    h, w = x.shape[-2:]
    ix = _source_coordinate(grid[..., 0], w, align_corners, padding_mode)
    iy = _source_coordinate(grid[..., 1], h, align_corners, padding_mode)
    if interpolation_mode == 1:  # nearest: round half to even, as torch's nearbyint
        return _taps(x, jnp.round(iy), jnp.round(ix))
    x0, y0 = jnp.floor(ix), jnp.floor(iy)
    wx, wy = (ix - x0)[:, None], (iy - y0)[:, None]
    return (
        _taps(x, y0, x0) * (1 - wx) * (1 - wy)
        + _taps(x, y0, x0 + 1) * wx * (1 - wy)
        + _taps(x, y0 + 1, x0) * (1 - wx) * wy
        + _taps(x, y0 + 1, x0 + 1) * wx * wy
    )
