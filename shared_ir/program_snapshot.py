"""A loaded program as plain data, which reads back without torch._dynamo.

`Program.load` keeps each `.pt2` it reads in the build cache in this form (the "program" stage,
keyed by the file's bytes): the graph as JSON (ops by name, arguments, the node metadata a .pt2
holds), the signature, and the tensors' bytes. No pickle: nothing in an entry runs as code.

Why: torch.export's loader gives every node a fake tensor, and making fake tensors
(`FakeTensorMode()`) imports torch._dynamo: 0.7-1.5 s of an mcu build of a small model here, as
much as the rest of a build whose float model the cache already holds. A snapshot reads back with
meta tensors in their place (shape, stride, dtype, no data, nothing imported beyond torch), and
the program's fingerprint, I/O and outputs are the loader's. What traces the graph again
(litert-torch's lowering, `run_decompositions`) needs real fake tensors: `with_fake_values` gives
them the loader's, once, where such a stage starts.
"""

from __future__ import annotations

import json
import operator
from typing import Any

from tpuedge.shared_ir.torch_compat import is_op_overload, snapshot_internals, tree_leaves, tree_map_only
from tpuedge.shared_ir.upstream_gate import Unavailable, fell_back

__all__ = ["encode", "encode_if_it_can", "decode", "with_fake_values", "Unsnapshottable"]

_MAGIC = b"tpuedge-program-snapshot-1\n"
# the node metadata a .pt2 keeps that tpuedge or litert-torch reads; a program with any other
# is not snapshot (it loads the usual way)
_KEPT_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn")


class Unsnapshottable(Exception):
    """The program holds something this format does not write (it then loads the usual way)."""


def _torch_dtype(name: str):
    import torch

    dtype = getattr(torch, name)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {name}")
    return dtype


def _encode_value(value: Any) -> Any:
    import torch
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return {"node": value.name}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}  # inf and nan too
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_encode_value(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": [[k, _encode_value(v)] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise Unsnapshottable(f"a value of type {type(value).__name__}")


def _decode_value(value: Any, nodes: dict) -> Any:
    import torch

    if not isinstance(value, dict):
        return value
    ((kind, inner),) = value.items()
    if kind == "node":
        return nodes[inner]
    if kind == "float":
        return float(inner)
    if kind in ("list", "tuple"):
        items = [_decode_value(v, nodes) for v in inner]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: _decode_value(v, nodes) for k, v in inner}
    if kind == "dtype":
        return _torch_dtype(inner)
    if kind == "device":
        return torch.device(inner)
    if kind in ("layout", "memory_format"):
        return getattr(torch, inner)
    raise ValueError(f"unknown value kind {kind!r}")


def _encode_val(val: Any) -> Any:
    """A node's value: a tensor's shape, stride, dtype and requires_grad, or a tuple of them."""
    import torch

    if isinstance(val, torch.Tensor):
        if not all(isinstance(d, int) for d in (*val.shape, *val.stride())):
            raise Unsnapshottable("a dynamic dimension")
        if val.device.type != "cpu" or val.layout != torch.strided:
            raise Unsnapshottable(f"a {val.device.type} {val.layout} tensor")
        return {
            "tensor": [list(val.shape), list(val.stride()), str(val.dtype).removeprefix("torch."), val.requires_grad]
        }
    if isinstance(val, (list, tuple)):
        return {"list" if isinstance(val, list) else "tuple": [_encode_val(v) for v in val]}
    if val is None or isinstance(val, (bool, int)):
        return val
    raise Unsnapshottable(f"a node value of type {type(val).__name__}")


def _decode_val(val: Any) -> Any:
    """`_encode_val`'s value back, each tensor a meta tensor (no data)."""
    import torch

    if not isinstance(val, dict):
        return val
    ((kind, inner),) = val.items()
    if kind == "tensor":
        shape, stride, dtype, requires_grad = inner
        return torch.empty_strided(shape, stride, dtype=_torch_dtype(dtype), device="meta", requires_grad=requires_grad)
    items = [_decode_val(v) for v in inner]
    return items if kind == "list" else tuple(items)


def _target_name(target) -> str:
    if is_op_overload(target):
        return target.name()  # "aten::conv2d" or "aten::add.Tensor"
    if target is operator.getitem:
        return "getitem"
    raise Unsnapshottable(f"a call to {target!r}")


def _target(name: str):
    import torch

    if name == "getitem":
        return operator.getitem
    namespace, rest = name.split("::")
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")


def _tensor_entry(t, store: str, name: str, offset: int) -> tuple[dict, bytes]:
    import torch

    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type != "cpu" or not t.is_contiguous():
        raise Unsnapshottable(f"{store} {name!r}: a {type(t).__name__} this format does not write as it is")
    data = t.detach()
    raw = (data.view(torch.int16) if data.dtype == torch.bfloat16 else data).numpy().tobytes()
    entry = {
        "store": store,
        "name": name,
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "offset": offset,
        "size": len(raw),
        "parameter": isinstance(t, torch.nn.Parameter),
        "requires_grad": t.requires_grad,
    }
    return entry, raw


def _tensor(entry: dict, blob: memoryview):
    import torch

    dtype = _torch_dtype(entry["dtype"])
    raw = bytearray(blob[entry["offset"] : entry["offset"] + entry["size"]])  # writable: the program owns it
    if dtype == torch.bfloat16:
        tensor = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=dtype)
    else:
        tensor = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    tensor = tensor.reshape(entry["shape"])
    if entry["parameter"]:
        return torch.nn.Parameter(tensor, requires_grad=entry["requires_grad"])
    return tensor.requires_grad_(entry["requires_grad"]) if entry["requires_grad"] else tensor


def encode(program) -> bytes:
    """`program` as snapshot bytes; raises Unsnapshottable where it holds what this format does
    not write (dynamic shapes, submodules, script objects, metadata it does not keep), or where
    torch's pieces for it are gated off (shared_ir/torch_compat.py)."""
    import torch

    try:
        pytree = snapshot_internals().pytree
    except Unavailable as exc:
        raise Unsnapshottable(str(exc)) from exc

    ep = program.exported_program
    calls = ep.module_call_graph
    if not calls or calls[0].fqn != "" or calls[0].signature is None or ep.range_constraints:
        raise Unsnapshottable("no top-level call signature, or range constraints")
    nodes = []
    for node in ep.graph.nodes:
        if node.op not in ("placeholder", "call_function", "output"):
            raise Unsnapshottable(f"a {node.op} node")
        extra = set(node.meta) - {"val", *_KEPT_META}
        if extra:
            raise Unsnapshottable(f"node metadata {sorted(extra)}")
        target = _target_name(node.target) if node.op == "call_function" else node.target
        entry = {
            "op": node.op,
            "name": node.name,
            "target": target,
            "args": _encode_value(node.args),
            "kwargs": _encode_value(dict(node.kwargs)),
        }
        if "val" in node.meta:
            entry["val"] = _encode_val(node.meta["val"])
        entry["meta"] = {k: _encode_value(node.meta[k]) for k in _KEPT_META if k in node.meta}
        nodes.append(entry)
    tensors, blobs, offset = [], [], 0
    example = ep.example_inputs
    example_leaves, example_spec = pytree.tree_flatten(example) if example is not None else ([], None)
    tables = [
        ("state", ep.state_dict.items()),
        ("constant", ep.constants.items()),
        ("example", ((str(i), t) for i, t in enumerate(example_leaves))),
    ]
    storages: set[int] = set()
    for store, items in tables:
        for name, t in items:
            if store != "example" and isinstance(t, torch.Tensor) and t.numel():
                if t.untyped_storage().data_ptr() in storages:  # tied weights: kept tied by the loader only
                    raise Unsnapshottable(f"{name!r} shares its memory with another tensor")
                storages.add(t.untyped_storage().data_ptr())
            entry, raw = _tensor_entry(t, store, name, offset)
            tensors.append(entry)
            blobs.append(raw)
            offset += len(raw)
    signature, call = ep.graph_signature, ep.module_call_graph[0].signature
    try:  # a pytree node type registered without a serialized name (torch.return_types.topk)
        specs = {
            "in_spec": pytree.treespec_dumps(call.in_spec),
            "out_spec": pytree.treespec_dumps(call.out_spec),
            "example_spec": pytree.treespec_dumps(example_spec) if example_spec is not None else None,
        }
    except (NotImplementedError, TypeError, ValueError) as exc:
        raise Unsnapshottable(f"a call signature torch's pytree can't write ({exc})") from None
    if not all(type(s.arg).__name__ == "TensorArgument" for s in (*signature.input_specs, *signature.output_specs)):
        raise Unsnapshottable("an input or output that is not a tensor")
    header = {
        "nodes": nodes,
        "input_specs": [
            {"kind": s.kind.name, "arg": s.arg.name, "target": s.target, "persistent": s.persistent}
            for s in signature.input_specs
        ],
        "output_specs": [{"kind": s.kind.name, "arg": s.arg.name, "target": s.target} for s in signature.output_specs],
        "call": {
            "in_spec": specs["in_spec"],
            "out_spec": specs["out_spec"],
            "forward_arg_names": call.forward_arg_names,
        },
        "submodules": [e.fqn for e in ep.module_call_graph[1:] if e.signature is None],
        "example_spec": specs["example_spec"],
        "dialect": ep.dialect,
        "tensors": tensors,
        "program": {
            "name": program.name,
            "activation_ranges": program.activation_ranges.to_json() if program.activation_ranges else None,
        },
    }
    if len(header["submodules"]) != len(ep.module_call_graph) - 1:
        raise Unsnapshottable("a submodule's call signature")
    text = json.dumps(header, sort_keys=True).encode()
    return _MAGIC + len(text).to_bytes(8, "little") + text + b"".join(blobs)


def encode_if_it_can(program) -> bytes | None:
    """`encode`, or None for a program it can't write (the build cache then stores nothing)."""
    try:
        return encode(program)
    except Unsnapshottable:
        return None
    except Exception as exc:  # noqa: BLE001 - torch's pytree and spec internals: the .pt2 loads as usual
        fell_back("program snapshot", repr(exc))
        return None


def decode(data: bytes) -> tuple[Any, str, Any]:
    """(exported program, name, activation ranges) of the Program `encode` wrote, its nodes'
    values meta tensors (`with_fake_values` gives fake ones). Raises Unavailable where torch's
    pieces for it are gated off: the build cache then drops the entry and loads the .pt2."""
    import torch
    import torch.fx
    from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
    from torch.export.graph_signature import (
        ExportGraphSignature,
        InputKind,
        InputSpec,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )

    internals = snapshot_internals()
    pytree = internals.pytree

    if not data.startswith(_MAGIC):
        raise ValueError("not a program snapshot")
    start = len(_MAGIC) + 8
    size = int.from_bytes(data[len(_MAGIC) : start], "little")
    header = json.loads(data[start : start + size])
    blob = memoryview(data)[start + size :]
    graph = torch.fx.Graph()
    made: dict = {}
    for entry in header["nodes"]:
        if entry["op"] == "placeholder":
            node = graph.placeholder(entry["name"])
        elif entry["op"] == "output":
            node = graph.output(_decode_value(entry["args"], made)[0])
        else:
            node = graph.create_node(
                "call_function",
                _target(entry["target"]),
                _decode_value(entry["args"], made),
                _decode_value(entry["kwargs"], made),
                name=entry["name"],
            )
        node.name = entry["name"]  # as torch.export's loader does: fx renames "input" (a builtin) to "input_1"
        if "val" in entry:
            node.meta["val"] = _decode_val(entry["val"])
        node.meta.update({k: _decode_value(v, made) for k, v in entry["meta"].items()})
        made[entry["name"]] = node
    stores: dict = {"state": {}, "constant": {}, "example": {}}
    for entry in header["tensors"]:
        stores[entry["store"]][entry["name"]] = _tensor(entry, blob)
    signature = ExportGraphSignature(
        input_specs=[
            InputSpec(InputKind[s["kind"]], TensorArgument(s["arg"]), s["target"], s["persistent"])
            for s in header["input_specs"]
        ],
        output_specs=[
            OutputSpec(OutputKind[s["kind"]], TensorArgument(s["arg"]), s["target"]) for s in header["output_specs"]
        ],
    )
    call = header["call"]
    calls = [
        ModuleCallEntry(
            "",
            ModuleCallSignature(
                inputs=[],
                outputs=[],
                in_spec=pytree.treespec_loads(call["in_spec"]),
                out_spec=pytree.treespec_loads(call["out_spec"]),
                forward_arg_names=call["forward_arg_names"],
            ),
        )
    ]
    calls += [ModuleCallEntry(fqn, None) for fqn in header["submodules"]]
    example = None
    if header["example_spec"] is not None:
        leaves = [stores["example"][str(i)] for i in range(len(stores["example"]))]
        example = pytree.tree_unflatten(leaves, pytree.treespec_loads(header["example_spec"]))
    ep = internals.program_class(
        root=torch.fx.GraphModule(torch.nn.Module(), graph),
        graph=graph,
        graph_signature=signature,
        state_dict=stores["state"],
        range_constraints={},
        module_call_graph=calls,
        example_inputs=example,
        constants=stores["constant"],
        verifiers=[internals.load_verifier(header["dialect"])],
    )
    meta = header["program"]
    ranges = None
    if meta["activation_ranges"]:
        from tpuedge.shared_ir.node_ranges import ActivationRanges

        ranges = ActivationRanges.from_json(meta["activation_ranges"])
    return ep, meta["name"], ranges


def with_fake_values(exported_program) -> None:
    """Give a snapshot's nodes fake tensors where they hold meta ones, as torch.export's loader
    makes them (one static FakeTensorMode for the program); a loaded program is left as it is."""
    import torch

    def is_meta(t) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type == "meta"

    vals = [node.meta.get("val") for node in exported_program.graph.nodes]
    if not any(is_meta(t) for t in tree_leaves(vals)):
        return
    mode = snapshot_internals(gated=False).fake_tensor_mode()  # a snapshot made these: its torch had them

    def fake(t):
        if not is_meta(t):
            return t
        with mode:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu", requires_grad=t.requires_grad)

    for node in exported_program.graph.nodes:
        if "val" in node.meta:
            node.meta["val"] = tree_map_only(torch.Tensor, fake, node.meta["val"])
