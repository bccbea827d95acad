"""The Program's ExportedProgram -> a float LiteRT flatbuffer, through litert-torch's own
pipeline below `litert_torch.convert()` (no second torch.export of the user's module):

    pre_convert_decomp() table -> [channels-last inputs] -> litert-torch FX passes
    -> litert_converter.exported_programs_to_flatbuffer(...)

litert-torch's decomposition table keeps GELU, LayerNorm, SDPA, avg-pool, ... whole so its
composite/fusion passes still see them (decomposing to core ATen first would lose them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["decompose_for_litert", "lower_to_float_flatbuffer", "SIGNATURE_KEY"]

SIGNATURE_KEY = "serving_default"


from tpuedge.edge.litert_session import litert_session


def _quiet() -> None:
    # litert-torch prints a progress line per stage unless told otherwise; our CLI reports itself.
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")


def decompose_for_litert(exported_program):
    """Apply litert-torch's pre-convert decomposition table (returns a new ExportedProgram)."""
    _quiet()
    with litert_session():
        from litert_torch import fx_infra

        fx_infra.silence_torch_logs()
        ep = fx_infra.graph_utils.reset_from_node_meta(exported_program)
        return fx_infra.safe_run_decompositions(ep, fx_infra.decomp.pre_convert_decomp(), can_skip=False)


@dataclass(frozen=True)
class _Signature:
    """What litert_converter reads from a signature: its name and flat input names."""

    name: str
    flat_arg_names: list[str]


def lower_to_float_flatbuffer(program, *, channels_last: bool = False) -> bytes:
    """Float32 .tflite bytes for `program`, inputs named as the Program's inputs."""
    _quiet()
    from tpuedge.edge.channels_last import channels_last_inputs

    ep = decompose_for_litert(program.exported_program)
    if channels_last:
        ep = channels_last_inputs(ep)
    with litert_session():
        from litert_torch._convert import core, litert_converter

        ep = core._run_convert_passes(ep)
        exporter = litert_converter.exported_programs_to_flatbuffer(
            [ep], [_Signature(SIGNATURE_KEY, list(program.input_names))]
        )
        return bytes(exporter.to_bytes())
