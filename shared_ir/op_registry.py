"""A per-backend table of ATen ops, with the one lookup order everyone uses.

Keys are op names as torch prints them: "aten.add.Tensor" (an overload) or "aten.add" (a
packet: registering it says every overload of the op is lowered). Lookup order: the exact
overload -> for a packet asked by name, its ".default" overload -> the packet, when the packet
itself was registered. A sibling overload never stands in for another ("aten.atan2.out" is not
"aten.atan2.default": different signature, different semantics). The interpreter, the checker
and the coverage report all call `lookup`, so they can't disagree. Registering the same key
twice is an error (a silent override hides bugs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.torch_compat import is_higher_order_op, is_op_overload, is_op_packet, op_name_parts

__all__ = ["OpRegistry", "op_key", "packet_key", "STRUCTURAL_OPS"]

# Python-level graph glue that every backend handles itself (tuple indexing of multi-output ops).
STRUCTURAL_OPS = frozenset({"_operator.getitem", "operator.getitem", "getitem"})


def op_key(target: Any) -> str:
    """Canonical name of a graph node's target: "aten.conv2d.default", "_operator.getitem"."""
    if isinstance(target, str):
        return target
    if is_op_overload(target):
        return ".".join(op_name_parts(target))
    if is_op_packet(target):
        return str(target)  # "aten.add"
    if is_higher_order_op(target):
        return f"higher_order.{target.name()}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or str(target)
    return f"{module}.{name}" if module else name


def packet_key(key: str) -> str:
    """ "aten.add.Tensor" -> "aten.add"; a packet key is returned unchanged."""
    parts = key.split(".")
    return ".".join(parts[:2]) if len(parts) >= 3 else key


class OpRegistry:
    """Maps op keys to backend entries (a lowering function, or capability data)."""

    def __init__(self, name: str):
        self.name = name
        self._entries: dict[str, Any] = {}

    def add(self, key: Any, entry: Any) -> None:
        key = op_key(key)
        if key in self._entries:
            raise InternalError(f"{self.name}: {key} is registered twice")
        self._entries[key] = entry

    def register(self, *keys: Any) -> Callable[[Callable], Callable]:
        """Decorator: `@table.register("aten.relu", "aten.relu_")`."""

        def wrap(fn: Callable) -> Callable:
            for key in keys:
                self.add(key, fn)
            return fn

        return wrap

    def lookup(self, target: Any) -> Any | None:
        """Exact overload -> (for a packet name) ".default" -> a registered packet; else None."""
        key = op_key(target)
        if key in self._entries:
            return self._entries[key]
        packet = packet_key(key)
        if packet == key:  # "aten.relu" asked by name: its default overload
            return self._entries.get(key + ".default")
        return self._entries.get(packet)

    def supports(self, target: Any) -> bool:
        return self.lookup(target) is not None

    def keys(self) -> list[str]:
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(sorted(self._entries.items()))

    def __contains__(self, target: Any) -> bool:
        return self.supports(target)

    def __len__(self) -> int:
        return len(self._entries)
