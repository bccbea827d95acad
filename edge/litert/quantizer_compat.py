"""ai-edge-quantizer's internals as tpuedge patches them, verified on ai-edge-quantizer 0.10.

- `large_weights_sliced()`: while the block runs, its `uniform_quantize` quantizes a per-channel
  weight over 32 MiB in slices (edge/litert/large_weights.py) for the block's threads; its chunked
  path for such a tensor cannot broadcast scales on any axis but the last. Installed only while
  a build quantizes, and undone by the last block to leave. Public route (another release, or
  `public_api_only()`): its own function, which quantizes every other tensor alike and stops
  with numpy's broadcast error on such a weight, as that release does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tpuedge.shared_ir.upstream_gate import ScopedPatch, fell_back, verified

__all__ = ["VERIFIED_QUANTIZER", "large_weights_sliced"]

VERIFIED_QUANTIZER = ("0.10",)
_PATCH = ScopedPatch()


def _install(patch: ScopedPatch):
    from ai_edge_quantizer.algorithms.uniform_quantize import uniform_quantize_tensor as module

    from tpuedge.edge.litert.large_weights import sliced

    original = module.uniform_quantize  # its callers look it up on the module: they all get the route
    module.uniform_quantize = patch.route(sliced(original), original)

    def undo() -> None:
        module.uniform_quantize = original

    return undo


@contextlib.contextmanager
def large_weights_sliced() -> Iterator[None]:
    stack = contextlib.ExitStack()
    if verified("ai-edge-quantizer", VERIFIED_QUANTIZER):
        _PATCH.enter_or_fall_back(stack, "large weights sliced", _install)
    else:
        fell_back("large weights sliced", "ai-edge-quantizer release not verified, or public API only")
    with stack:
        yield
