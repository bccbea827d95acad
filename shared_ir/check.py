"""`Program.check(target)`: every problem a target has with a program, reported at once."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from tpuedge.shared_ir.errors import Problem
from tpuedge.shared_ir.op_registry import STRUCTURAL_OPS, op_key, packet_key
from tpuedge.shared_ir.sources import node_source
from tpuedge.shared_ir.torch_compat import is_op_overload
from tpuedge.shared_ir.targets import get_target

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["check_program", "is_core_aten"]

_MAX_SOURCES = 3


def is_core_aten(target) -> bool:
    import torch

    return (
        is_op_overload(target)
        and target.namespace == "aten"
        and (torch.Tag.core in target.tags or torch.Tag.view_copy in target.tags)
    )


def _is_custom(target) -> bool:
    return is_op_overload(target) and target.namespace not in ("aten", "prims")


def check_program(program: "Program", target_name: str) -> list[Problem]:
    target = get_target(target_name)
    cap = target.capability()
    ep = cap.decompose(program.exported_program) if cap.decompose else program.exported_program

    unsupported: dict[str, list] = defaultdict(list)
    bad_dtypes: dict[str, list] = defaultdict(list)
    too_high: dict[str, list] = defaultdict(list)
    too_wide: dict[str, list] = defaultdict(list)
    random: dict[str, list] = defaultdict(list)
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        dtype = str(getattr(val, "dtype", ""))
        if dtype in cap.unsupported_dtypes:
            bad_dtypes[dtype].append(node)
        if node.op != "call_function":
            continue
        key = op_key(node.target)
        if key in STRUCTURAL_OPS:
            continue
        if not cap.random_ops and _draws_random_numbers(node):
            random[key].append(node)
        elif not cap.ops.supports(node.target):  # a custom op too, unless the target registers it (tpuedge.cache_write)
            unsupported[key].append(node)
        elif key in cap.max_rank and len(getattr(val, "shape", ())) > cap.max_rank[key][0]:
            too_high[key].append(node)
        elif key in cap.max_inputs and _tensor_inputs(node) > cap.max_inputs[key][0]:
            too_wide[key].append(node)

    problems = [_op_problem(target_name, key, nodes, cap) for key, nodes in sorted(unsupported.items())]
    problems += [_rank_problem(target_name, key, nodes, cap) for key, nodes in sorted(too_high.items())]
    problems += [_inputs_problem(target_name, key, nodes, cap) for key, nodes in sorted(too_wide.items())]
    problems += [
        Problem(
            kind="random",
            subject=key,
            message=f"the forward draws random numbers, so its outputs change from run to run: no {target_name} model "
            "can be checked against it (and a converted one would not draw the same numbers)",
            suggestion="export in eval mode, and pass what the model draws as an input instead (HF ViTMAE takes `noise`), "
            "or take the random op out of forward",
            count=len(nodes),
            sources=_sources(nodes),
        )
        for key, nodes in sorted(random.items())
    ]
    problems += [
        Problem(
            kind="dtype",
            subject=dtype.removeprefix("torch."),
            message=f"{target_name} does not take {dtype.removeprefix('torch.')} tensors",
            suggestion="cast the model and inputs to float32 (model.float()) before export",
            count=len(nodes),
            sources=_sources(nodes),
        )
        for dtype, nodes in sorted(bad_dtypes.items())
    ]
    if program.has_dynamic_shapes and not cap.dynamic_shapes:
        dyn = [s.describe() for s in program.inputs if any(isinstance(d, str) for d in s.shape)]
        problems.append(
            Problem(
                kind="dynamic-shape",
                subject=", ".join(dyn),
                message=f"{target_name} needs static shapes but these inputs have symbolic dims",
                suggestion="export without dynamic_shapes (one program per shape) for this target",
            )
        )
    return problems


def _draws_random_numbers(node) -> bool:
    """Whether the call draws random numbers: torch tags the ops that may nondeterministic_seeded,
    among them a dropout told train=False (the identity, which the passes remove), an attention
    with dropout_p=0, an LSTM out of training and rrelu out of training, which draw none."""
    import torch

    from tpuedge.shared_ir.passes.graph_edit import call_arguments

    target = node.target
    if not (is_op_overload(target) and torch.Tag.nondeterministic_seeded in target.tags):
        return False
    given = call_arguments(node)
    if given.get("train", True) is False or given.get("training", True) is False:
        return False
    probability = next((given[k] for k in ("dropout_p", "dropout", "p") if k in given), None)  # LSTM: dropout
    return not (isinstance(probability, (int, float)) and probability == 0)


def _sources(nodes) -> tuple[str, ...]:
    seen: list[str] = []
    for node in nodes:
        src = node_source(node)
        if src and src not in seen:
            seen.append(src)
    more = len(seen) - _MAX_SOURCES
    return tuple(seen[:_MAX_SOURCES] + ([f"... {more} more"] if more > 0 else []))


def _rank_problem(target_name: str, key: str, nodes, cap) -> Problem:
    limit, whose = cap.max_rank[key]
    ranks = sorted({len(n.meta["val"].shape) for n in nodes})
    return Problem(
        kind="rank",
        subject=key,
        message=f"{target_name} runs this op on tensors of at most {limit} dimensions ({whose}); here it has "
        f"{' or '.join(map(str, ranks))}",
        suggestion=f"keep that tensor at {limit}-D or less (merge axes that move together into one with a reshape)",
        count=len(nodes),
        sources=_sources(nodes),
    )


def _tensor_inputs(node) -> int:
    """How many tensors `node` reads: the items of a list argument (cat, stack), else its node arguments."""
    first = node.args[0] if node.args else None
    if isinstance(first, (list, tuple)):
        return len(first)
    return sum(hasattr(a, "op") for a in node.args)


def _inputs_problem(target_name: str, key: str, nodes, cap) -> Problem:
    limit, whose, suggestion = cap.max_inputs[key]
    widths = sorted({_tensor_inputs(n) for n in nodes})
    return Problem(
        kind="inputs",
        subject=key,
        message=f"{target_name} runs this op on at most {limit} input tensors ({whose}); here it reads "
        f"{' or '.join(map(str, widths))}",
        suggestion=suggestion,
        count=len(nodes),
        sources=_sources(nodes),
    )


def _op_problem(target_name: str, key: str, nodes, cap) -> Problem:
    custom = _is_custom(nodes[0].target)
    if custom:
        message = f"custom op (outside core ATen); no tpuedge backend can lower it for {target_name}"
        suggestion = "express it with standard torch ops, or register a decomposition for it"
    else:
        message = f"{target_name} has no lowering for this op"
        suggestion = "rewrite that layer with ops `tpuedge ops --target " + target_name + "` lists"
    suggestion = cap.suggestions.get(key, suggestion)
    rewrite = cap.rewritten.get(packet_key(key))
    if rewrite:  # the target's passes take some forms of it; this one stayed
        suggestion = f"{target_name}'s IR passes take only some forms of it ({rewrite}), not this one; {suggestion}"
    return Problem(
        kind="op",
        subject=key,
        message=message,
        suggestion=suggestion,
        count=len(nodes),
        sources=_sources(nodes),
    )
