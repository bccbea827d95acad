"""Casts in one canonical form: no-op casts vanish, real dtype casts become `aten._to_copy`.

torch.export keeps `x.to(torch.float32)`, `x.to(x.device)`, `x.to(other)`, `x.type_as(y)` as
the overload the user called (`aten.to.dtype`, `to.dtype_layout`, `to.device`, `to.other`, ...),
each preceded by an `_assert_tensor_metadata` check of its input. On an edge target there is one
device and one layout, so:
  - a cast whose output dtype equals its input dtype is the identity and is removed;
  - a cast that changes the dtype becomes `aten._to_copy(x, dtype=...)`, one op key that a
    capability table maps to the target's cast kernel (TFLite's CAST);
  - except bool -> float32 (masks: `mask.to(x.dtype)`), which becomes `where(mask, 1.0, 0.0)`:
    exact, and a select over constants quantizes to int8 where a CAST into float would leave a
    float tensor in an integer-only graph;
  - `_assert_tensor_metadata` (a trace-time dtype/device assertion, no output) is removed: the
    graph's dtypes are static, recorded in every node's meta.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import SOURCE_META, call_functions, finish, replace_node

__all__ = ["CanonicalCasts"]

_CAST_OVERLOADS = ("dtype", "dtype_layout", "device", "other", "prim_dtype", "prim_other", "prim_Device")


def _targets():
    import torch

    aten = torch.ops.aten
    casts = {getattr(aten.to, o) for o in _CAST_OVERLOADS if hasattr(aten.to, o)}
    casts |= {aten._to_copy.default, aten.type_as.default}
    return casts, {aten._assert_tensor_metadata.default}


def _dtype(node) -> Any:
    return getattr(node.meta.get("val"), "dtype", None)


class CanonicalCasts:
    name = "canonical-casts"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        casts, asserts = _targets()
        found = call_functions(exported_program, casts | asserts)
        if not found:
            return exported_program, PassResult(self.name, 0, "no casts in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        names = {n.name for n in found}
        removed = kept = 0
        for node in [n for n in graph.nodes if n.name in names]:
            if node.target in asserts:
                graph.erase_node(node)
                continue
            x, out_dtype = node.args[0], _dtype(node)
            if out_dtype is None or _dtype(x) is None:
                continue  # no dtype recorded: leave it for the check to report
            if out_dtype == _dtype(x):
                replace_node(ep, node, x)
                removed += 1
                continue
            if node.target == torch.ops.aten._to_copy.default and set(node.kwargs) <= {"dtype"}:
                kept += 1
                continue  # already canonical
            with graph.inserting_before(node):
                if _dtype(x) == torch.bool and out_dtype == torch.float32:
                    cast = graph.call_function(torch.ops.aten.where.Scalar, (x, 1.0, 0.0))
                else:
                    cast = graph.call_function(torch.ops.aten._to_copy.default, (x,), {"dtype": out_dtype})
            cast.meta.update({k: node.meta[k] for k in SOURCE_META if k in node.meta})
            cast.meta["val"] = node.meta["val"]
            replace_node(ep, node, cast)
            kept += 1
        finish(ep)
        return ep, PassResult(
            self.name,
            removed + kept,
            f"removed {removed} no-op cast(s) (same dtype; one device on the target); "
            f"{kept} dtype cast(s) as aten._to_copy (bool -> float32 as where(mask, 1, 0))",
            {"removed": removed, "dtype_casts": kept},
        )
