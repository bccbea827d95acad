"""The cloud build's stages through the build cache: the jax.export blob, and the TPU compile
report per topology (a deviceless XLA:TPU compile takes seconds per program; its report is data).

Both are keyed by the fingerprint of the program being exported (after any batch rebind), with
the versions of jax, jaxlib and libtpu and tpuedge's own source in every key (see
`tpuedge.shared_ir.cache_keys`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpuedge.shared_ir.cache_keys import cached_stage, decode_json, encode_json
from tpuedge.shared_ir.stage_times import timed

__all__ = ["export_blob", "tpu_report"]


def export_blob(program, export) -> tuple[bytes, Any]:
    """(serialized jax.export blob, its Exported) of `export`, the forward of `program`."""
    from tpuedge.cloud.stablehlo_export import PORTABLE_PLATFORMS, serialize_export

    made: dict[str, Any] = {}

    def build() -> bytes:
        blob, made["exported"] = serialize_export(export)
        return blob

    with timed("jax.export (cpu, cuda, tpu) and serialize"):
        blob = cached_stage("jax_export", {"ir": program.fingerprint, "platforms": list(PORTABLE_PLATFORMS)}, build)
        if "exported" in made:
            return blob, made["exported"]
        import jax

        return blob, jax.export.deserialize(bytearray(blob))


def tpu_report(lowered, compile_report: Callable[[], tuple[dict | None, dict]]) -> tuple[dict | None, dict]:
    """`compile_report()` (-> (tpu_compile.json content or None, manifest summary)), cached per
    program and topology when libtpu can compile here (a skipped compile is not cached)."""
    from tpuedge.cloud.tpu_compile import libtpu_unavailable_reason

    if libtpu_unavailable_reason():
        return compile_report()
    parts = {
        "ir": lowered.program.fingerprint,
        "topology": lowered.topology.name,
        "batch": lowered.batch_info,
        "train_step": lowered.train_step,
        "loss": lowered.loss,
        "sharding": lowered.sharding,
    }
    report, status = cached_stage(
        "tpu_compile", parts, lambda: list(compile_report()), encode=encode_json, decode=decode_json
    )
    return report, status
