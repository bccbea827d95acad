"""StableHLO for the commonest plain ops, emitted directly instead of through litert-torch's jax bridge.

litert-torch lowers float add/sub/mul/div, relu, clamp, hardtanh, sigmoid, tanh, sqrt, permute,
view, squeeze, unsqueeze, expand, clone, mm, bmm, mean, softmax, max_pool2d, slice, select,
split_with_sizes and constant_pad_nd through its jax bridge: every distinct (op, shapes, arguments)
is a `jax.jit(...).lower()`, a StableHLO -> VHLO serialization, a parse and an inlining, about
8 ms each. A CNN has hundreds of distinct ones (MobileNetV3-small: 246, about 2 s of its 4 s MLIR
lowering). These lowerings emit what the bridge's jax functions lower to, in the bridge's form (a
private function per distinct computation, called where the op was; jax's broadcast steps and
constants), in microseconds; the converter then writes the same flatbuffer, byte for byte
(tests/test_direct_lowerings.py compares them). A model all of whose bridged ops are taken here
never starts jax's lowering machinery: its first use in a process cost ~15 MB and ~20 ms.

Only the plain case is taken here: operands of the result's element type (and, for float32
arithmetic, integer ones converted as jax converts them), no extra arguments (alpha, rounding
modes, memory formats other than the default). Anything else goes to the lowering litert-torch
registered, unchanged. `direct_lowerings()` installs them for the length of one lowering, for
the threads inside it (edge/litert/litert_torch_compat.py: counted, under a lock, so concurrent builds
share one installation), then puts litert-torch's own back: a user's `litert_torch.convert`, in
this process or in another thread meanwhile, lowers with litert-torch's own.
"""

from __future__ import annotations

import contextlib

__all__ = ["direct_lowerings"]


def _ours() -> dict:
    from tpuedge.edge.litert.direct_arithmetic import arithmetic_lowerings
    from tpuedge.edge.litert.direct_shapes import shape_lowerings

    return {**arithmetic_lowerings(), **shape_lowerings()}


def direct_lowerings() -> contextlib.AbstractContextManager[None]:
    """Our lowerings in litert-torch's registry while the block runs, for its threads
    (litert_session() held; edge/litert/litert_torch_compat.py installs and undoes them)."""
    from tpuedge.edge.litert.litert_torch_compat import lowerings_replaced

    return lowerings_replaced(_ours())
