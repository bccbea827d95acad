"""When ai-edge-quantizer cannot quantize a float model our converter wrote: a user error, not a crash.

The float model is sound (it converted and runs), but the quantizer stops on some ops: a
STABLEHLO_REDUCE_WINDOW (a dilated 3-D max pool lowers to one) fails its calibration with
"MAXIMUM not found in tensor_name_to_qsv", because the window's body is a subgraph the calibrator
never runs. That was an internal error with a traceback, under `--quantize auto` (the default) too.
Now it is one paragraph (exit 2, nothing written) naming the scheme, what the quantizer said and
the ops it likely stopped at, with their module scopes; `--quantize auto` leaves that scheme out
and says so (edge/android/android_auto.py).
"""

from __future__ import annotations

from tpuedge.shared_ir.errors import UserError

__all__ = ["QuantizerRefusal", "quantizer_refusal", "suspect_ops"]

_SUGGESTIONS = {
    "android": "--quantize dynamic-int8 or fp16 (int8 or float16 weights, float compute), or --quantize auto, "
    "which leaves out a scheme the quantizer cannot take",
    "mcu": "replacing the layer these ops come from (an mcu build is integer only: no float fallback)",
    None: "another --quantize scheme, or replacing the layer these ops come from",
}


class QuantizerRefusal(UserError):
    """ai-edge-quantizer could not quantize the model the way the scheme asks (exit 2)."""

    def __init__(self, message: str, scheme: str, reason: str):
        super().__init__(message)
        self.scheme = scheme
        self.reason = reason  # one line, for --quantize auto's table


def suspect_ops(float_tflite: bytes) -> dict[str, list[str]]:
    """The float model's ops the quantizer's calibration can't follow: StableHLO ops (the
    converter's fallback for what has no TFLite builtin) and ops with subgraphs (WHILE, IF), each
    with the tensor names (module scopes) of its outputs."""
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    names = tflite_file.operator_names(model)
    subgraph = model.subgraphs[0]
    tensors = subgraph.tensors or []
    found: dict[str, list[str]] = {}
    for op in subgraph.operators or []:
        name = names[op.opcodeIndex]
        if name.startswith("STABLEHLO_") and name != "STABLEHLO_COMPOSITE" or name in ("WHILE", "IF", "CALL_ONCE"):
            outs = [int(i) for i in (op.outputs if op.outputs is not None else []) if i >= 0]
            found.setdefault(name, []).extend(tflite_file.text(tensors[i].name) for i in outs[:1])
    return found


def quantizer_refusal(name: str, target: str | None, scheme: str, float_tflite: bytes, error) -> QuantizerRefusal:
    """The user error for `error` (a QuantizerError) on `name`'s float model (`target`: the calling
    target's name, None when no target called)."""
    said = " ".join(f"{type(error.error).__name__}: {error.error}".split())
    said = said if len(said) <= 300 else said[:297] + "..."
    failed = f"failed while {error.step} ({said})"
    reason = f"ai-edge-quantizer {failed}"
    ops = ", ".join(
        f"{op} x{len(where)} (at {', '.join(sorted(set(where))[:3])})"
        for op, where in sorted(suspect_ops(float_tflite).items())
    )
    message = (
        f"{name}: ai-edge-quantizer cannot quantize this model{f' for {target}' if target else ''} --quantize {scheme}: "
        f"it {failed}. "
        + (f"The float model has ops its calibration cannot follow, the likely cause: {ops}. " if ops else "")
        + "The float model itself converted; nothing was written and the output folder is as it was. "
        f"Try {_SUGGESTIONS.get(target, _SUGGESTIONS[None])}. TPUEDGE_VERBOSE=1 shows what the quantizer printed."
    )
    return QuantizerRefusal(message, scheme, reason + (f"; {ops}" if ops else ""))
