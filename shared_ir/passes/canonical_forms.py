"""The canonical forms every edge target's passes begin with.

One op can reach the IR in several spellings: ops inside a `torch.autocast` or `torch.no_grad`
region (kept as one call over a submodule), a no-op cast, an in-place op on a private value,
an ATen alias (torch.multiply), `F.pad` whatever its mode, SiLU as its own op, a write into a
slice of a computed value (`out[:, t] = v`: HF RWKV's recurrence, whose writes litert-torch's
own lowering failed to convert), a repeat (litert-torch's layout pass moves it to NHWC with its
counts in NCHW order; the view and expand it is stay NCHW). Both edge targets rewrite them to one form first, in this one
list, so that where mcu's own passes find nothing to do, android and mcu hand litert-torch the
same program and share one cached float model
(edge/litert_lowering.lowered_fingerprint). A pass added here reaches both targets; a pass
added to one target's list alone makes its programs differ from the other's wherever it
applies (an in-place pass in mcu's list alone would stop torchvision's CNNs from sharing it).
"""

from __future__ import annotations

__all__ = ["canonical_forms"]


def canonical_forms(*, keep_detach: bool = False) -> list:
    """The passes, in order. `keep_detach=True` for a graph that trains (where `detach` stops
    gradients, edge/mcu_capability.mcu_passes(training=True))."""
    from tpuedge.shared_ir.passes.alias_ops import AliasAsCanonicalOp
    from tpuedge.shared_ir.passes.autocast_regions import InlineAutocastRegions, InlineGradModeRegions
    from tpuedge.shared_ir.passes.casts import CanonicalCasts
    from tpuedge.shared_ir.passes.explicit_pad import ExplicitPad
    from tpuedge.shared_ir.passes.identity_ops import RemoveIdentityOps
    from tpuedge.shared_ir.passes.in_place_ops import InPlaceAsOutOfPlace
    from tpuedge.shared_ir.passes.repeat_expand import RepeatAsExpand
    from tpuedge.shared_ir.passes.silu_form import SiluAsSigmoidMul
    from tpuedge.shared_ir.passes.slice_assign import SliceAssignmentAsConcat

    return [
        InlineAutocastRegions(),
        InlineGradModeRegions(),
        CanonicalCasts(),
        RemoveIdentityOps(keep_detach=keep_detach),
        InPlaceAsOutOfPlace(),
        AliasAsCanonicalOp(),
        ExplicitPad(),
        SiluAsSigmoidMul(),
        SliceAssignmentAsConcat(),
        RepeatAsExpand(),
    ]
