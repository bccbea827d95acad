"""What each output of a Program means to the accuracy budget: class scores or values.

    meanings = output_meanings(program)   # one OutputMeaning per user output, in order
    [m.class_scores for m in meanings]    # True: the budget holds its top-1 agreement too

A quantized classifier can keep a mean cosine of 0.99 on 1000 logits and still flip one
prediction in ten: the cosine is spent on the many small logits, the answer is the largest.
So an output that looks like class scores is held to its argmax as well. It looks like class
scores when it is one float vector per sample, (batch, C) with C >= 2, written by

- a softmax or log-softmax (any C), or
- a Linear layer (linear / addmm / mm) with C >= MIN_LINEAR_CLASSES outputs.

A narrower Linear head is as often a regression (box offsets, landmarks) as a classifier, so it
keeps the cosine budget alone; `--budget-outputs NAME:top1` holds its argmax all the same. Ops
that only move or relabel values (view, reshape, flatten, squeeze, clone, dropout) are looked
through; anything else after the head (a normalization, a tanh) makes it values.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuedge.shared_ir.torch_compat import is_op_overload, op_name_parts

__all__ = ["OutputMeaning", "output_meanings", "MIN_LINEAR_CLASSES"]

MIN_LINEAR_CLASSES = 16

_SCORES = {"softmax", "_softmax", "log_softmax", "_log_softmax"}
_LINEAR = {"linear", "addmm", "mm"}
_LOOKED_THROUGH = {
    "view",
    "_unsafe_view",
    "reshape",
    "flatten",
    "squeeze",
    "unsqueeze",
    "clone",
    "dropout",
    "alias",
    "contiguous",
    "expand_copy",
    "view_copy",
    "_to_copy",
    "detach",
}


@dataclass(frozen=True)
class OutputMeaning:
    name: str
    class_scores: bool
    why: str  # in words, for the report: "softmax over 2 classes", "Linear with 1000 outputs", "values"

    def to_json(self) -> dict:
        return {"name": self.name, "class_scores": self.class_scores, "why": self.why}


def _op_name(node) -> str:
    target = getattr(node, "target", None)
    if is_op_overload(target):
        return op_name_parts(target)[1]
    return str(getattr(target, "__name__", target)).split(".")[0]


def _meaning(name: str, node) -> OutputMeaning:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    shape = tuple(getattr(val, "shape", ()))
    floating = getattr(val, "dtype", None) is not None and val.dtype.is_floating_point
    classes = shape[-1] if len(shape) == 2 and str(shape[-1]).isdigit() else None
    if not floating or classes is None or int(classes) < 2:
        return OutputMeaning(name, False, "values (not one float vector of 2+ per sample)")
    classes = int(classes)
    while node is not None and getattr(node, "op", None) == "call_function" and _op_name(node) in _LOOKED_THROUGH:
        node = next((a for a in node.args if hasattr(a, "op")), None)
    if node is None or getattr(node, "op", None) != "call_function":
        return OutputMeaning(name, False, "values")
    op = _op_name(node)
    if op in _SCORES:
        return OutputMeaning(name, True, f"{op.lstrip('_')} over {classes} classes")
    if op in _LINEAR and classes >= MIN_LINEAR_CLASSES:
        return OutputMeaning(name, True, f"Linear with {classes} outputs")
    if op in _LINEAR:
        return OutputMeaning(
            name, False, f"values (Linear with {classes} < {MIN_LINEAR_CLASSES} outputs: class scores or a regression)"
        )
    return OutputMeaning(name, False, f"values (written by {op})")


def output_meanings(program) -> list[OutputMeaning]:
    """One OutputMeaning per user output of `program`, in the order of `program.outputs`."""
    from torch.export.graph_signature import OutputKind

    ep = program.exported_program
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    values = out_node.args[0]
    user = [values[i] for i, spec in enumerate(ep.graph_signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    return [_meaning(name, node) for name, node in zip(program.output_names, user)]
