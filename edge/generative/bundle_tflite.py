"""A ProgramBundle's entries as one float LiteRT flatbuffer, a signature each, each weight once."""

from __future__ import annotations

__all__ = ["float_bundle_tflite"]


def float_bundle_tflite(bundle) -> bytes:
    """The float .tflite of every entry of `bundle`, one signature each (build cache: per bundle)."""
    from tpuedge.edge.litert.litert_lowering import lower_signatures_to_float_flatbuffer
    from tpuedge.shared_ir.cache_keys import cached_stage
    from tpuedge.shared_ir.progress import stage_progress

    def lower() -> bytes:
        with stage_progress(f"{bundle.name}: litert-torch lowering of {len(bundle.entries)} entry points"):
            return lower_signatures_to_float_flatbuffer(list(bundle.entries.items()), weights_in_place=True)

    return cached_stage("float_bundle_tflite", {"bundle": bundle.fingerprint}, lower)
