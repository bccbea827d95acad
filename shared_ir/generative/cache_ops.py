"""`tpuedge::cache_write`: the one op a captured decoder writes its KV cache with.

    new_cache = torch.ops.tpuedge.cache_write(cache, update, input_pos, dim)

`update` is written into a copy of `cache` along `dim`, starting at `input_pos[0]`: the
positions of one prefill or decode step are consecutive, so the write is one contiguous block.
The start is clamped so the block fits (start = min(max(start, 0), cache.size(dim) -
update.size(dim))), which is what StableHLO's dynamic_update_slice does: LiteRT's
DYNAMIC_UPDATE_SLICE, XLA and this reference all agree, and a generation loop never relies on
the clamp (it refuses to write past the cache's end).

An op of its own, not ATen's `index_copy`, because its meaning is the contiguous write every
backend has a kernel for; `index_copy` scatters one row per position, and a prefill padded to
its bucket would scatter its padding over position 0.
"""

from __future__ import annotations

import torch

__all__ = ["cache_write", "CACHE_WRITE"]


@torch.library.custom_op("tpuedge::cache_write", mutates_args=())
def cache_write(cache: torch.Tensor, update: torch.Tensor, input_pos: torch.Tensor, dim: int) -> torch.Tensor:
    length = update.shape[dim]
    start = int(input_pos.reshape(-1)[0])
    start = min(max(start, 0), cache.shape[dim] - length)
    out = cache.clone()
    out.narrow(dim, start, length).copy_(update.to(cache.dtype))
    return out


@cache_write.register_fake
def _(cache: torch.Tensor, update: torch.Tensor, input_pos: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty_like(cache)


CACHE_WRITE = torch.ops.tpuedge.cache_write.default
