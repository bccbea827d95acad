"""torch.export -> Program, with capture failures turned into one clear UserError."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.sources import model_frame_from_traceback

__all__ = ["export"]

_HINTS = {
    "GuardOnDataDependentSymNode": "the model branches or sizes a tensor on a tensor's value; use "
    "torch.cond for the branch or torch._check(...) to state the size",
    "Could not guard on data-dependent": "the model branches on a tensor's value; use torch.cond or torch._check",
    "Unsupported": "rewrite the Python construct torch.export can't trace (see the source line)",
    "ConstraintViolation": "the dynamic_shapes spec does not fit what the model does with that dim; "
    "narrow the Dim range or mark the dim static",
}
# Functions of a detector's post-processing: non-maximum suppression keeps a data-dependent number
# of boxes, which no static on-device graph holds (torchvision's SSD, RetinaNet, FCOS, Faster R-CNN)
_DETECTION_POSTPROCESS = frozenset(
    {
        "nms",
        "batched_nms",
        "_batched_nms_vanilla",
        "_batched_nms_coordinate_trick",
        "postprocess_detections",
        "filter_proposals",
        "box_iou",
    }
)
_DETECTION_HINT = (
    "build the network up to its raw box and score outputs (a one-stage torchvision detector, SSD, RetinaNet "
    "or FCOS: a Module whose forward returns model.head(list(model.backbone(x).values())), on the image "
    "normalized as model.transform does) and run non-maximum suppression in the app; it keeps a "
    "data-dependent number of boxes, which a static on-device graph cannot hold"
)


@contextlib.contextmanager
def _mode(module, training: bool):
    """Set train/eval for the capture and restore every submodule's own flag afterwards."""
    flags = {m: m.training for m in module.modules()}
    module.train(training)
    try:
        yield
    finally:
        for m, flag in flags.items():
            m.training = flag


def _as_tuple(example_inputs: Any) -> tuple:
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, list):
        return tuple(example_inputs)
    if not isinstance(example_inputs, tuple):
        raise UserError(
            f"example_inputs must be a tuple of tensors, got {type(example_inputs).__name__}; "
            "pass e.g. (torch.randn(1, 3, 32, 32),)."
        )
    return example_inputs


def export(
    model: Any,
    example_inputs: Sequence[Any] | Any,
    *,
    dynamic_shapes: Any = None,
    name: str | None = None,
    training: bool = False,
    strict: bool = False,
):
    """Capture `model` with torch.export into the shared IR.

    The program is kept as captured (no early decomposition): each backend applies its own
    table when it lowers. `training=True` captures train-mode behaviour (dropout, BatchNorm
    batch statistics and running-stat updates); the module's own flags are restored after.
    """
    import torch

    from tpuedge.shared_ir.program import Program

    if not isinstance(model, torch.nn.Module):
        raise UserError(
            f"tpuedge.export expects a torch.nn.Module, got {type(model).__name__}; "
            "wrap plain functions in a Module whose forward calls them."
        )
    from tpuedge.shared_ir.stage_times import timed
    from tpuedge.shared_ir.torch_compat import preload_export

    args = _as_tuple(example_inputs)
    with timed("import torch.export (dynamo, functorch)"):
        preload_export()  # what torch.export.export imports on first use
    with _mode(model, training), timed("capture (torch.export)"):
        try:
            ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes, strict=strict)
        except Exception as exc:  # torch raises many types; all are the user's capture problem
            raise _capture_error(model, exc) from exc
    _check_tensor_outputs(model, ep)
    return Program(ep, name=name or type(model).__name__.lower())


def _check_tensor_outputs(model, ep) -> None:
    """Every output a tensor: torch.export keeps a `None` or a Python number a forward returns
    as a constant output, which no artifact (LiteRT, TFLite-Micro, StableHLO) can return; it
    reached the backends as an internal error."""
    import torch
    from torch.export.graph_signature import OutputKind

    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    user = [
        value
        for value, spec in zip(out_node.args[0], ep.graph_signature.output_specs)
        if spec.kind == OutputKind.USER_OUTPUT
    ]
    constants = [(i, value) for i, value in enumerate(user) if not isinstance(value, torch.fx.Node)]
    if constants:
        listed = ", ".join(f"output {i} is {value!r}" for i, value in constants)
        raise UserError(
            f"{type(model).__name__}.forward returns values that are not tensors ({listed}; outputs counted "
            f"after flattening tuples and dicts): a built model returns tensors only. Return only the tensors, "
            "e.g. `return logits` instead of `return logits, None`, or wrap the model in a Module whose forward does."
        )


def _capture_error(model, exc: BaseException) -> UserError:
    import traceback

    text = f"{type(exc).__name__}: {exc}"
    first = text.strip().splitlines()[0]
    if len(first) > 240:  # a guard's symbolic expression runs to thousands of characters
        first = first[:200] + " ..."
    functions = {frame.name for frame in traceback.extract_tb(exc.__traceback__)}
    if functions & _DETECTION_POSTPROCESS:
        hint = _DETECTION_HINT
    else:
        hint = next(
            (h for key, h in _HINTS.items() if key in text), "check the model runs eagerly on the example inputs"
        )
    where = model_frame_from_traceback(exc.__traceback__)
    loc = f" at {where}" if where else ""
    return UserError(f"torch.export could not capture {type(model).__name__}{loc}: {first}. Try: {hint}.")
