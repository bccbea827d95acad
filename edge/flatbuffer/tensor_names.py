"""Tensor names in a written .tflite: the modules the tensor came from, by qualified name.

litert-torch names each tensor after the `nn_module_stack` of the IR nodes it came from: the
whole chain of modules, each as its class's Python path and last attribute
("timm.models.byobnet.ByobNet/torch.nn.modules.container.Sequential_stages/.../torch.nn.
modules.normalization.LayerNorm_norm1"), and a fused op joins its nodes' chains with ";". No
runtime reads these names: they are for people, for per-layer verify and for the int8 search's
recipes, which read them as module scopes (`shared_ir.sources.module_scope`). tpuedge writes each
chain as that scope: the module's qualified name, as `named_modules()` gives it, and its class
("stages.3.1.transformer.0.norm1/LayerNorm"). An int8 MobileViT-xxs carried 109 KB of names in the
converter's chains shortened to class names; 43 KB this way.

The converter's chains cannot always be told apart: a root module that iterates two
ModuleLists of Conv1d calls `depthwise[0]` and `pointwise[0]` both "Net/Conv1d_0". So litert-torch
is handed each node's module stack as one entry, its scope (`stack_as_scope`), and writes that;
`ScopeNames` maps the parts of a name to scopes (verify reads names through it too, and so also
places tensors of files named by the converter or by older builds, where a chain is not
ambiguous); `shorten_tensor_names` writes each tensor name as its distinct scopes, in their order:
each name unique in a float model (ai-edge-quantizer reads it), shared by a scope's tensors in a
quantized one.
"""

from __future__ import annotations

import struct
from collections import Counter

from tpuedge.edge.flatbuffer import tflite_file

__all__ = [
    "ScopeNames",
    "renamed_tensors",
    "scopes_digest",
    "share_scope_names",
    "short_scope",
    "shorten_tensor_names",
    "stack_as_scope",
]

_U32 = struct.Struct("<I")


def short_scope(scope: str) -> str:
    """ "pkg.mod.Net/torch.nn.modules.conv.Conv2d_conv1" -> "Net/Conv2d_conv1"."""
    return "/".join(layer.rsplit(".", 1)[-1] for layer in scope.split("/"))


def stack_as_scope(exported_program) -> None:
    """Each node's `nn_module_stack` as one entry, ("", its module scope), in `exported_program`,
    litert-torch's private copy (its nodes' meta dicts are copies): the converter writes an entry's
    class as it is when it is a string, and an empty path adds no attribute, so the tensor names
    come out as scopes. torch.export's verifier takes the entry (a str -> (str, str) dict)."""
    from tpuedge.shared_ir.sources import module_scope

    for node in exported_program.graph.nodes:
        if scope := module_scope(node):
            node.meta["nn_module_stack"] = {"scope": ("", scope)}


def scopes_digest(exported_program) -> str:
    """What the names depend on beyond the graph: each node's module scope. The float model's cache
    key needs it: the IR fingerprint leaves module stacks out, and a model whose class was renamed
    got the old name's tensors from the cache, bytes a cold build does not write."""
    import hashlib

    from tpuedge.shared_ir.sources import module_scope

    digest = hashlib.sha256()
    for node in exported_program.graph.nodes:
        digest.update(f"{node.name}={module_scope(node)}\n".encode())
    return digest.hexdigest()[:16]


# what ai-edge-quantizer appends to the name of a tensor it adds: the int8 copy of a float
# tensor ("..._quantized"), the float copy of an int8 one ("..._dequant")
_QUANTIZER_SUFFIXES = ("_quantized", "_dequant")


def _unsuffixed(part: str) -> tuple[str, str]:
    for suffix in _QUANTIZER_SUFFIXES:
        if part.endswith(suffix):
            return part[: -len(suffix)], suffix
    return part, ""


class ScopeNames:
    """A program's module chains (as litert-torch writes them, class paths cut) -> its module
    scopes. A name part already a scope stays one; a chain the program does not hold, or holds for
    two modules, keeps its class names (`short_scope`)."""

    def __init__(self, exported_program=None):
        from tpuedge.shared_ir.sources import module_chain, module_scope

        chains: dict[str, set[str]] = {}
        self._scope: dict[str, str] = {}
        for node in exported_program.graph.nodes if exported_program is not None else ():
            if scope := module_scope(node):
                self._scope[scope] = scope
                chains.setdefault(module_chain(node), set()).add(scope)
        for chain, scopes in chains.items():
            if len(scopes) == 1:
                self._scope.setdefault(chain, *scopes)

    def part(self, part: str) -> str:
        return self._scope.get(part) or self._scope.get(short := short_scope(part)) or short

    def _read(self, name: str) -> tuple[list[str], str]:
        """A name's ";"-joined parts as scopes, once each, in order, and the quantizer's suffix
        ("" if none), wherever it was appended ("blocks.0/Conv2d;12_dequant"). The empty and
        numeric parts the converter adds, and our own ";k", carry nothing verify reads."""
        scopes, suffix = [], ""
        for part in name.split(";"):
            part, added = _unsuffixed(part)
            suffix = suffix or added
            if part and not part.isdigit():
                scopes.append(self.part(part))
        return list(dict.fromkeys(scopes)), suffix

    def name(self, name: str) -> str:
        """A tensor name's parts, each as its scope, once each, in order, then the quantizer's
        suffix; a name without a module chain ("serving_default_x", "StatefulPartitionedCall:0")
        comes out as it went in."""
        scopes, suffix = self._read(name)
        return ";".join(scopes) + suffix if scopes else name

    def scopes(self, name: str) -> set[str]:
        """The module scopes a tensor name holds (what verify compares with its nodes'): a tensor
        the quantizer added holds its source's values, so it is read in its source's scopes."""
        return set(self._read(name)[0])


def shorten_tensor_names(tflite: bytes, scopes: ScopeNames, *, unique: bool = True) -> bytes:
    """The same model with every tensor name written as its scopes (`ScopeNames.name`). Buffers
    stored after the flatbuffer stay there. The input bytes when no name changes (decided on the
    names read in place: the object tree of an unrolled LSTM's 10k tensors takes a second to unpack).

    unique (a float model): a name taken already gets ";1", ";2", ... as the converter's own names
    do (numeric parts, which verify skips). ai-edge-quantizer refuses a model whose names repeat
    ("Tensor name ... is not unique"), and a user may quantize a float model we wrote.
    unique=False (a quantized model, which nothing quantizes again): the tensors of one scope share
    its name, which the file then holds once (tflite_file's writer writes equal strings once). The
    numbers told a reader nothing and cost bytes: an int8 MobileViT-xxs's names take 18 KB of its
    file this way, 42 KB with them; an int8 Resemblyzer's (one LSTM scope over 8k tensors) 0.5 KB, 96 KB.

    A float model is renamed where it lies (`renamed_tensors`): its weights are most of
    its bytes, and unpacking and repacking them was a build's peak memory (DistilBERT: 913 MB, 77 MB
    above the lowering's own peak). A quantized one is repacked, its shared names stored once."""
    names = [name for graph in tflite_file.tensor_names(tflite) for name in graph]  # unique across subgraphs
    renamed = _unique_names(names, scopes) if unique else [scopes.name(name) for name in names]
    if renamed == names:
        return tflite
    if unique and (written := renamed_tensors(tflite, renamed)) is not None:
        return written  # a float model, as large as its weights: renamed where it lies, not repacked
    model = tflite_file.read_model(tflite)
    tensors = [tensor for graph in model.subgraphs for tensor in graph.tensors or []]
    for tensor, name in zip(tensors, renamed):
        tensor.name = name.encode()
    return tflite_file.write_model(model, external_from=tflite)


def share_scope_names(model, scopes: ScopeNames) -> None:
    """Name each tensor of `model` (a `schema.ModelT`, from tflite_file.read_model) by its scopes,
    shared by a scope's tensors: `shorten_tensor_names(..., unique=False)` on an object tree a
    caller rewrites anyway (mcu's), without packing and unpacking it once more."""
    for graph in model.subgraphs or []:
        for tensor in graph.tensors or []:
            tensor.name = scopes.name(tflite_file.text(tensor.name)).encode()


def _unique_names(names: list[str], scopes: ScopeNames) -> list[str]:
    """Each name renamed, a repeat given the first free ";k" suffix. The next suffix to try is
    kept per name: thousands of tensors share one scope in an unrolled recurrent layer, and
    trying ";1", ";2", ... from the start for each was quadratic (4 s on Resemblyzer's 3-layer
    LSTM over 160 steps)."""
    taken: set[str] = set()
    next_suffix: dict[str, int] = {}
    out = []
    for name in names:
        short = scopes.name(name)
        suffix = next_suffix.get(short, 0)
        while (unique := short if not suffix else f"{short};{suffix}") in taken:
            suffix += 1
        next_suffix[short] = suffix + 1
        taken.add(unique)
        out.append(unique)
    return out


def renamed_tensors(data: bytes, names: list[str], source: str | None = None) -> bytes | None:
    """`data` with its tensors renamed (`names`: one per tensor, across subgraphs, in
    `tflite_file.tensor_names`' order), every other byte where it was: no object tree, no repack, one copy of
    the file (the repack peaked 77 MB above the lowering itself for DistilBERT's 44 MB). A new
    name no longer than the old one is written over it (length prefix, name, zeros up to the old
    terminator); a longer one, or one whose string another tensor shares, is appended after the
    file's last byte (4-byte aligned, as strings are) and the tensor's offset moved to it:
    flatbuffer offsets point forward, and buffers stored after the flatbuffer keep their absolute
    offsets. None if a tensor to rename has no name field (`tflite_file.write_model` can add one)."""
    fields = tflite_file.tensor_name_fields(data, source)  # (offset's position, string's position, length)
    if len(fields) != len(names):
        raise ValueError(f"{len(names)} names for {len(fields)} tensors")
    uses = Counter(string for _, string, _ in fields)
    patches, appended, end = [], [], len(data)
    for (field, string, length), name in zip(fields, names):
        encoded = name.encode()
        if bytes(data[string + 4 : string + 4 + length]) == encoded if field else not encoded:
            continue
        if not field:
            return None
        if uses[string] == 1 and len(encoded) <= length:
            patches.append((string, _U32.pack(len(encoded)) + encoded + bytes(length - len(encoded) + 1)))
            continue
        end = -(-end // 4) * 4
        appended.append((end, _U32.pack(len(encoded)) + encoded + b"\0"))
        patches.append((field, _U32.pack(end - field)))
        end += len(appended[-1][1])
    view, chunks, at = memoryview(data), [], 0
    for position, patch in sorted(patches):
        chunks += [view[at:position], patch]
        at = position + len(patch)
    chunks.append(view[at:])
    at = len(data)
    for position, string in appended:
        chunks += [bytes(position - at), string]
        at = position + len(string)
    return b"".join(chunks)
