"""A litert-torch failure on a program the check passed, as the user's one-paragraph error: the
IR node the converter was computing when it failed, its op and the model line it came from.

litert-torch re-traces the program (its decompositions, its layout pass) with torch's FX
interpreter, which holds the node it runs; the innermost such node of the failure's traceback
is where the converter's shapes or ops went wrong. Its name and source line are the IR's own:
the re-traced graph keeps both.
"""

from __future__ import annotations

import traceback
from typing import Any

__all__ = ["converter_failure", "failing_node"]


def failing_node(exc: BaseException) -> Any:
    """The innermost FX node being interpreted where `exc` (or what caused it) was raised, or None."""
    import torch

    found, seen = None, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            if frame.f_code.co_filename.endswith(("fx/interpreter.py", "fx/experimental/symbolic_shapes.py")):
                node = frame.f_locals.get("n", frame.f_locals.get("node"))
                if isinstance(node, torch.fx.Node):
                    found = node
        if found is not None:
            return found
        exc = exc.__cause__ or exc.__context__
    return None


def converter_failure(program: Any, exc: BaseException, target: str | None):
    """The UserError (exit 2, one paragraph) for litert-torch failing on `program` with `exc`."""
    from tpuedge.shared_ir.errors import UserError
    from tpuedge.shared_ir.sources import node_source

    said = " ".join(str(exc).split("\n", 1)[0].split())[:300]
    node = failing_node(exc)
    if node is None:
        where = " (no IR node could be tied to it)"
    else:
        ir_nodes = {n.name: n for n in program.exported_program.graph.nodes}
        op = ir_nodes[node.name].target if node.name in ir_nodes else node.target
        source = node_source(node) or (node_source(ir_nodes[node.name]) if node.name in ir_nodes else None)
        where = f" at IR node {node.name} ({op})" + (f" from {source}" if source else "")
    return UserError(
        f"litert-torch failed to convert {program.name} for {target or 'LiteRT'}{where}: {type(exc).__name__}: {said}. "
        f"{'The check passed it: ' if target else ''}the converter lost track of that op's shapes or form, not of "
        f"an op it lacks. Nothing was written. Try: write that line with other ops (an expand or broadcasting instead of a repeat, fewer "
        f"dimensions), build the same program for cloud-tpu, or run with TPUEDGE_VERBOSE=1 for the converter's log "
        f"and report it, so an IR pass learns this form."
    )
