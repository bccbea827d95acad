"""Which node of the captured program each node of its core-ATen decomposition came from.

The cloud interpreter runs the decomposed graph, but users (and per-layer verify) know the
captured program's node names; torch records the provenance in `node.meta["from_node"]`.
"""

from __future__ import annotations

import operator
from collections import defaultdict

__all__ = ["captured_name_map"]


def _origin(node, original: set[str]) -> str | None:
    """Name of the captured node a decomposed node came from (torch's from_node provenance)."""
    frontier = list(node.meta.get("from_node") or [])
    while frontier:
        source = frontier.pop(0)
        if getattr(source, "name", None) in original:
            return source.name
        frontier.extend(getattr(source, "from_node", None) or [])
    return node.name if node.name in original else None


def _shape_sig(val):
    if isinstance(val, (tuple, list)):
        return ("tuple", len(val))
    if hasattr(val, "shape"):
        return (tuple(str(d) for d in val.shape), str(val.dtype))
    return None


def captured_name_map(captured, decomposed):
    """decomposed name -> captured name; the key `intermediates` uses for each decomposed node;
    and the captured getitem nodes (name -> (source, index)) resolved from tuple values."""
    orig_nodes = {n.name: n for n in captured.graph.nodes if n.op == "call_function"}
    original = set(orig_nodes)
    groups: dict[str, list] = defaultdict(list)
    origin_of: dict[str, str] = {}
    for node in decomposed.graph.nodes:
        if node.op != "call_function":
            continue
        src = _origin(node, original)
        if src is not None:
            origin_of[node.name] = src
            groups[src].append(node)
    keys: dict[str, str] = {}
    for src, nodes in groups.items():
        want = _shape_sig(orig_nodes[src].meta.get("val"))
        representative = next((n for n in reversed(nodes) if _shape_sig(n.meta.get("val")) == want), None)
        for n in nodes:
            keys[n.name] = src if n is representative else f"{src}/{n.name}"
    getitems = {}
    for name, node in orig_nodes.items():
        if node.target is operator.getitem and hasattr(node.args[0], "name"):
            getitems[name] = (node.args[0].name, node.args[1])
    return origin_of, keys, getitems
