"""View, layout and indexing ops: view/permute/expand/slice/cat/split, gather/scatter/index, pads."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tpuedge.cloud.lowerings.registry import jax_dtype, lowering, normalize_dim

__all__: list[str] = []


@lowering("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(x, size):
    return jnp.reshape(x, tuple(size))


@lowering("aten.permute.default")
def permute(x, dims):
    return jnp.transpose(x, tuple(dims))


@lowering("aten.expand.default")
def expand(x, size, implicit=False):
    lead = len(size) - x.ndim
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(size))
    return jnp.broadcast_to(x, shape)


@lowering("aten.squeeze.dims")
def squeeze_dims(x, dims):
    # torch leaves dims whose size is not 1 alone instead of raising
    axes = tuple(d for d in (normalize_dim(d, x.ndim) for d in dims) if x.ndim and x.shape[d] == 1)
    return jnp.squeeze(x, axes) if axes else x


@lowering("aten.squeeze.dim")
def squeeze_dim(x, dim):
    return squeeze_dims(x, [dim])


@lowering("aten.squeeze.default")
def squeeze_all(x):
    return jnp.squeeze(x)


@lowering("aten.unsqueeze.default")
def unsqueeze(x, dim):
    return jnp.expand_dims(x, dim % (x.ndim + 1))


@lowering("aten.slice.Tensor")
def slice_tensor(x, dim=0, start=None, end=None, step=1):
    index = [slice(None)] * x.ndim
    index[normalize_dim(dim, x.ndim)] = slice(start, end, step)
    return x[tuple(index)]


@lowering("aten.select.int")
def select(x, dim, index):
    dim = normalize_dim(dim, x.ndim)
    return lax.index_in_dim(x, index % x.shape[dim], dim, keepdims=False)


@lowering("aten.cat.default")
def cat(tensors, dim=0):
    # torch skips legacy empty 1-d tensors in cat
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    return jnp.concatenate(kept, axis=normalize_dim(dim, kept[0].ndim))


@lowering("aten.split_with_sizes.default")
def split_with_sizes(x, split_sizes, dim=0):
    points = np.cumsum(split_sizes)[:-1].tolist()
    return jnp.split(x, points, axis=normalize_dim(dim, x.ndim))


@lowering("aten.split.Tensor")
def split(x, split_size, dim=0):
    dim = normalize_dim(dim, x.ndim)
    points = list(range(split_size, x.shape[dim], split_size))
    return jnp.split(x, points, axis=dim)


@lowering("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default")
def identity(x, memory_format=None):
    return x


@lowering("aten.detach.default")
def detach(x):
    # the value as it is, no gradient through it: a straight-through estimator's
    # z + (q - z).detach(), a stop-gradient branch (tests/test_cloud_detach.py)
    return lax.stop_gradient(x)


@lowering("aten._to_copy.default")
def to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    return x if dtype is None else x.astype(jax_dtype(dtype))


@lowering("aten.copy.default")
def copy(x, src, non_blocking=False):
    return jnp.broadcast_to(jnp.asarray(src).astype(x.dtype), x.shape)


@lowering("aten.flip.default")
def flip(x, dims):
    return jnp.flip(x, tuple(dims))


@lowering("aten.unfold.default")
def unfold(x, dimension, size, step):
    """Tensor.unfold: windows of `size` every `step` along `dimension`, the window as a new last
    axis (timm's HaloNet cuts its attention halos this way)."""
    if x.ndim == 0:
        return jnp.reshape(x, (1,))
    dim = normalize_dim(dimension, x.ndim)
    count = (x.shape[dim] - size) // step + 1
    index = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    return jnp.moveaxis(jnp.take(x, index, axis=dim), dim + 1, -1)


@lowering("aten.roll.default")
def roll(x, shifts, dims=()):
    if not dims:
        return jnp.roll(x.reshape(-1), tuple(shifts)).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), tuple(dims))


@lowering("aten.repeat.default")
def repeat(x, repeats):
    return jnp.tile(x, tuple(repeats))


@lowering("aten.diagonal.default")
def diagonal(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, normalize_dim(dim1, x.ndim), normalize_dim(dim2, x.ndim))


@lowering("aten.as_strided.default")
def as_strided(x, size, stride, storage_offset=None):
    # valid for the contiguous tensors the graph holds: gather from the flat storage
    flat = x.reshape(-1)
    index = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = n
        index = index + (np.arange(n) * s).reshape(shape)
    return flat[jnp.asarray(index.astype(np.int32))]


# ---- indexing ------------------------------------------------------------------------------
def _other_dims_cropped(x, index, dim):
    """torch's gather/scatter take index sizes <= self sizes on the other dims."""
    crop = tuple(slice(None) if d == dim else slice(0, index.shape[d]) for d in range(x.ndim))
    return x[crop]


def _src_cropped(src, index):
    """scatter reads src only where index has entries: src[:i0, :i1, ...]."""
    return src[tuple(slice(0, n) for n in index.shape)]


def _scatter_coords(index, dim):
    coords = list(jnp.indices(index.shape, sparse=True))
    coords[dim] = index
    return tuple(coords)


@lowering("aten.gather.default")
def gather(x, dim, index, sparse_grad=False):
    dim = normalize_dim(dim, x.ndim)
    if x.ndim == 0:
        return x
    return jnp.take_along_axis(_other_dims_cropped(x, index, dim), index, axis=dim)


@lowering("aten.scatter.src", "aten.scatter.value")
def scatter(x, dim, index, src):
    dim = normalize_dim(dim, x.ndim)
    if hasattr(src, "shape") and src.ndim:
        src = _src_cropped(src, index)
    return x.at[_scatter_coords(index, dim)].set(src)


@lowering("aten.scatter_add.default")
def scatter_add(x, dim, index, src):
    dim = normalize_dim(dim, x.ndim)
    return x.at[_scatter_coords(index, dim)].add(_src_cropped(src, index))


@lowering("aten.scatter_reduce.two")
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    dim = normalize_dim(dim, x.ndim)
    coords = _scatter_coords(index, dim)
    src = _src_cropped(src, index)
    hit = jnp.zeros(x.shape, bool).at[coords].set(True)
    if reduce in ("sum", "mean"):
        base = x if include_self else jnp.where(hit, 0, x)
        out = base.at[coords].add(src)
        if reduce == "mean":
            count = jnp.zeros(x.shape, x.dtype).at[coords].add(1) + (1 if include_self else 0)
            out = jnp.where(hit, out / jnp.maximum(count, 1), x)
            if jnp.issubdtype(x.dtype, jnp.integer):
                out = jnp.floor_divide(base.at[coords].add(src), jnp.maximum(count, 1)).astype(x.dtype)
                out = jnp.where(hit, out, x)
        return out
    if reduce == "prod":
        base = x if include_self else jnp.where(hit, 1, x)
        return base.at[coords].multiply(src)
    if reduce in ("amax", "amin"):
        info = jnp.finfo(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype)
        fill = info.min if reduce == "amax" else info.max
        base = x if include_self else jnp.where(hit, fill, x)
        return base.at[coords].max(src) if reduce == "amax" else base.at[coords].min(src)
    raise ValueError(f"scatter_reduce: unknown reduce {reduce!r}")


@lowering("aten.index.Tensor")
def index(x, indices):
    return x[tuple(slice(None) if i is None else i for i in indices)]


@lowering("aten.index_put.default")
def index_put(x, indices, values, accumulate=False):
    where = tuple(slice(None) if i is None else i for i in indices)
    return x.at[where].add(values) if accumulate else x.at[where].set(values)


@lowering("aten.index_select.default")
def index_select(x, dim, index):
    return jnp.take(x, index, axis=normalize_dim(dim, x.ndim))


@lowering("aten.select_scatter.default")
def select_scatter(x, src, dim, index):
    dim = normalize_dim(dim, x.ndim)
    where = [slice(None)] * x.ndim
    where[dim] = index % x.shape[dim]
    return x.at[tuple(where)].set(src)


@lowering("aten.slice_scatter.default")
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    where = [slice(None)] * x.ndim
    where[normalize_dim(dim, x.ndim)] = slice(start, end, step)
    return x.at[tuple(where)].set(src)


@lowering("aten.masked_scatter.default")
def masked_scatter(x, mask, source):
    # static-shape form: the k-th True position (row-major) takes source.flatten()[k]
    mask = jnp.broadcast_to(mask, x.shape)
    position = jnp.cumsum(mask.reshape(-1)) - 1
    taken = source.reshape(-1)[jnp.clip(position, 0, source.size - 1)].reshape(x.shape)
    return jnp.where(mask, taken, x)


@lowering("aten.embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    rows = jnp.take(weight, indices, axis=0)
    if padding_idx is not None and padding_idx >= 0:
        # torch never updates the padding row: same value, zero gradient
        keep = (indices != padding_idx)[..., None]
        rows = jnp.where(keep, rows, lax.stop_gradient(rows))
    return rows


# ---- padding -------------------------------------------------------------------------------
def _pairs(x, pad):
    """torch pad lists run from the last dim backwards, (before, after) each."""
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return widths


@lowering("aten.constant_pad_nd.default")
def constant_pad_nd(x, pad, value=0):
    # lax.pad takes negative widths (cropping) as torch does
    config = [(lo, hi, 0) for lo, hi in _pairs(x, pad)]
    return lax.pad(x, jnp.asarray(value, x.dtype), config)


def _spatial_pad(mode):
    def pad_fn(x, padding):
        widths = [(0, 0)] * (x.ndim - len(padding) // 2) + [
            (padding[2 * i], padding[2 * i + 1]) for i in reversed(range(len(padding) // 2))
        ]
        return jnp.pad(x, widths, mode=mode)

    return pad_fn


for _n in (1, 2, 3):
    lowering(f"aten.reflection_pad{_n}d.default")(_spatial_pad("reflect"))
for _n in (1, 2, 3):
    lowering(f"aten.replication_pad{_n}d.default")(_spatial_pad("edge"))


@lowering(
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten._assert_async.msg",
    "aten._assert_async.default",
)
def assert_metadata(*args, **kwargs):
    # shape/dtype asserts torch.export leaves in the graph (static shapes make them true), and the
    # data-dependent range checks of decompositions (F.one_hot's index bounds), which a jitted
    # XLA program cannot raise: torch checks them when the model runs there
    return None


@lowering("tpuedge.cache_write.default")
def cache_write(cache, update, input_pos, dim):
    """tpuedge's KV-cache write (shared_ir/generative/cache_ops.py): `update` written along `dim`
    from input_pos[0], the start clamped so it fits, as XLA's dynamic_update_slice does."""
    start = jnp.reshape(input_pos, (-1,))[0].astype(jnp.int32)
    return lax.dynamic_update_slice_in_dim(cache, update.astype(cache.dtype), start, axis=dim)
