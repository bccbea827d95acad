"""The float .tflite of a Program, lowered once per IR, and samples in that file's input layout.

`float_tflite` keeps the last few float models in memory and each in the build cache on disk
(the "float_tflite" stage, one per layout and fingerprint of the program litert-torch is given),
so the conversions of one IR in a process, and android and mcu builds of it that share a cache,
lower it through litert-torch once.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from tpuedge.shared_ir.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["float_tflite", "clear_float_cache", "tflite_layout_inputs"]

_FLOAT_CACHE: "OrderedDict[tuple[str, bool], bytes]" = OrderedDict()
_FLOAT_CACHE_SIZE = 8
_LOCK = threading.Lock()


def clear_float_cache() -> None:
    """Forget converted float models (the next build lowers through litert-torch again)."""
    with _LOCK:
        _FLOAT_CACHE.clear()


def float_tflite(
    program: "Program", *, channels_last: bool = False, cache: bool = True, target: str | None = None
) -> bytes:
    """The float32 .tflite of `program` (cached per IR fingerprint and module scopes: the same IR
    gives the same bytes, its tensor names those of its modules)."""
    from tpuedge.edge.flatbuffer.tensor_names import scopes_digest
    from tpuedge.shared_ir.progress import stage_progress

    key = (program.fingerprint, scopes_digest(program.exported_program), bool(channels_last))
    with _LOCK:
        if cache and key in _FLOAT_CACHE:
            _FLOAT_CACHE.move_to_end(key)
            return _FLOAT_CACHE[key]
    if program.has_dynamic_shapes:
        raise UserError(
            f"{program.name} has dynamic input dims ({', '.join(s.describe() for s in program.inputs)}); "
            f"the {target or 'LiteRT'} target needs static shapes: export without dynamic_shapes."
        )
    try:
        with stage_progress(f"{program.name}: litert-torch lowering to a float .tflite"):
            data = _float_stage(program, channels_last, cache)
    except UserError:
        raise
    except Exception as exc:  # litert-torch raises plain exceptions for unsupported graphs
        # the calling target's own check says which ops it can't take (this module names no target)
        problems = program.check(target) if target else []
        if problems:
            from tpuedge.shared_ir.errors import ProblemsError

            raise ProblemsError(
                f"{program.name} can't be lowered for {target}; nothing was written:", problems
            ) from exc
        refusal = converter_refusal(str(exc))
        if refusal:  # an op the tables know, in a form the converter's verifier refuses: the model's line
            raise UserError(
                f"litert-torch's converter refused {program.name}{refusal}. The check passed it: its op tables know "
                f"these ops, not every shape and rank the converter takes. Nothing was written. Try: rewrite that "
                f"line (fewer dimensions, broadcasting instead of a materialized expand), or run with "
                f"TPUEDGE_VERBOSE=1 for the converter's log and report it, so the check learns this case."
            ) from exc
        from tpuedge.edge.litert.converter_failure import converter_failure

        raise converter_failure(program, exc, target) from exc
    with _LOCK:
        _FLOAT_CACHE[key] = data
        while len(_FLOAT_CACHE) > _FLOAT_CACHE_SIZE:
            _FLOAT_CACHE.popitem(last=False)
    return data


# MLIR's verifier, as the converter reports it: "<file>:<line>:<col>: error: 'tfl.pad' op failed to verify ..."
_VERIFIER_ERROR = re.compile(
    r"(?:(?P<file>[^\s:]+\.py):(?P<line>\d+):\d+: )?error: (?P<what>'(?:tfl|stablehlo|mhlo)\.\w+' op [^\n]+)"
)


def converter_refusal(text: str) -> str | None:
    """ " at net.py:7 (return F.pad(...)): 'tfl.pad' op failed to verify that operand 0 is at most
    5-D" for the first verifier error in a converter failure; None when it is no such error."""
    from tpuedge.shared_ir.sources import source_line

    found = _VERIFIER_ERROR.search(text)
    if found is None:
        return None
    where = f" at {source_line(found['file'], int(found['line']))}" if found["file"] else ""
    return f"{where}: {found['what'].strip()}"


def _float_stage(program: "Program", channels_last: bool, cache: bool) -> bytes:
    from tpuedge.edge.litert.litert_lowering import litert_ir_passes, lowered_fingerprint
    from tpuedge.edge.flatbuffer.tensor_names import scopes_digest
    from tpuedge.shared_ir.cache_keys import cached_stage

    if not cache:
        return _lowered(program, channels_last)
    return cached_stage(  # on disk: one float model for every LiteRT target's build of an IR
        # keyed by the program litert-torch is given: android's IR and mcu's rewritten one meet
        # there when mcu's own passes changed nothing else (most CNNs). NHWC changes only rank-4
        # float inputs: other models share one float model across layouts
        "float_tflite",
        {
            "ir": lowered_fingerprint(program),
            "channels_last": bool(channels_last) and _has_image_input(program),
            "tensor_names": scopes_digest(litert_ir_passes(program.exported_program)),
        },
        lambda: _lowered(program, channels_last),
    )


def _lowered(program: "Program", channels_last: bool) -> bytes:
    """litert-torch's float model with its tensor names written as module scopes
    (edge/flatbuffer/tensor_names.py), once here: every scheme quantizes from it, so a float build writes it
    as it is and a quantized model comes out so named, with no copy of the model per build to
    rename it."""
    from tpuedge.edge.litert.litert_lowering import lower_to_float_flatbuffer
    from tpuedge.edge.flatbuffer.tensor_names import ScopeNames, shorten_tensor_names

    return shorten_tensor_names(
        lower_to_float_flatbuffer(program, channels_last=channels_last), ScopeNames(program.exported_program)
    )


def _has_image_input(program: "Program") -> bool:
    return any(len(s.shape) == 4 and s.dtype.startswith("float") for s in program.inputs)


def tflite_layout_inputs(sample: list[np.ndarray], channels_last: bool) -> list[np.ndarray]:
    """A Program-layout sample (NCHW) in the .tflite's layout (NHWC for rank-4 float inputs)."""
    if not channels_last:
        return list(sample)
    return [
        np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 and np.issubdtype(x.dtype, np.floating) else x
        for x in sample
    ]
