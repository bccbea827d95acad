"""Tensor names in a written .tflite: litert-torch's module scopes, shortened to what is read.

litert-torch names each tensor after the `nn_module_stack` of the IR nodes it came from, with
full Python class paths ("torchvision.models.mobilenetv2.MobileNetV2/torch.nn.modules.conv.
Conv2d_0"), and a fused op joins its nodes' scopes with ";", often the same scope several times.
No runtime reads these names: they are for people and for per-layer verify, which compares
only class and attribute names (the module part of a class path can differ between the process
that built the artifact and the one that verifies it). Those long names cost bytes in every
file and flash on a board: 125 KB of a 4.1 MB int8 MobileNetV2, 3% of it.

`short_scope` is the one shortening (verify's matching uses it too); `shorten_tensor_names`
writes each tensor name as its distinct scopes, shortened, in their order.
"""

from __future__ import annotations

from tpuedge.edge import tflite_file

__all__ = ["short_scope", "short_tensor_name", "shorten_tensor_names"]


def short_scope(scope: str) -> str:
    """"pkg.mod.Net/torch.nn.modules.conv.Conv2d_conv1" -> "Net/Conv2d_conv1"."""
    return "/".join(layer.rsplit(".", 1)[-1] for layer in scope.split("/"))


def short_tensor_name(name: str) -> str:
    """A tensor name's ";"-joined scopes, each shortened, once each, in order (the empty and
    numeric parts the converter adds carry nothing verify reads); a name without a class path
    ("serving_default_x", "StatefulPartitionedCall:0") comes out as it went in."""
    parts = [short_scope(part) for part in name.split(";") if part and not part.isdigit()]
    return ";".join(dict.fromkeys(parts)) if parts else name


def shorten_tensor_names(tflite: bytes) -> bytes:
    """The same model with every tensor name shortened (`short_tensor_name`) and still unique: a
    name taken already gets ";1", ";2", ... as the converter's own names do (numeric parts, which
    verify skips). ai-edge-quantizer refuses a model whose names repeat ("Tensor name ... is not
    unique"), and a user may quantize a float model we wrote. Buffers stored after the flatbuffer
    stay there. The input bytes when no name changes (decided on the names read in place: the
    object tree of an unrolled LSTM's 10k tensors takes a second to unpack)."""
    names = [name for graph in tflite_file.tensor_names(tflite) for name in graph]  # unique across subgraphs
    renamed = _unique_short_names(names)
    if renamed == names:
        return tflite
    model = tflite_file.read_model(tflite)
    tensors = [tensor for graph in model.subgraphs for tensor in graph.tensors or []]
    for tensor, name in zip(tensors, renamed):
        tensor.name = name.encode()
    return tflite_file.write_model(model, external_from=tflite)


def _unique_short_names(names: list[str]) -> list[str]:
    """Each name shortened, a repeat given the first free ";k" suffix. The next suffix to try is
    kept per short name: thousands of tensors share one scope in an unrolled recurrent layer, and
    trying ";1", ";2", ... from the start for each was quadratic (4 s on Resemblyzer's 3-layer
    LSTM over 160 steps)."""
    taken: set[str] = set()
    next_suffix: dict[str, int] = {}
    out = []
    for name in names:
        short = short_tensor_name(name)
        suffix = next_suffix.get(short, 0)
        while (unique := short if not suffix else f"{short};{suffix}") in taken:
            suffix += 1
        next_suffix[short] = suffix + 1
        taken.add(unique)
        out.append(unique)
    return out
