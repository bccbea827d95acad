"""Model source lines for graph nodes, taken from torch.export's `node.meta["stack_trace"]`."""

from __future__ import annotations

import os
import re

__all__ = [
    "node_source",
    "module_scope",
    "module_chain",
    "user_frame_from_traceback",
    "model_frame_from_traceback",
    "source_line",
]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n(?P<code>[^\n]*)')
# Frames inside these libraries are never the user's model code.
_LIBRARY_MARKERS = (f"{os.sep}torch{os.sep}", f"{os.sep}site-packages{os.sep}", "<frozen", "<string>")
# torch itself and what it calls while tracing: never where a model's code went wrong
_FRAMEWORK_MARKERS = (
    f"{os.sep}torch{os.sep}",
    f"{os.sep}sympy{os.sep}",
    f"{os.sep}functorch{os.sep}",
    "<frozen",
    "<string>",
)
# tpuedge's own folders (in an editable install they sit beside each other in the repo).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OUR_DIRS = tuple(os.path.join(_ROOT, d) + os.sep for d in ("tpuedge", "shared_ir", "cloud", "edge", "quantize"))


def _is_library(path: str) -> bool:
    return any(k in path for k in _LIBRARY_MARKERS) or os.path.abspath(path).startswith(_OUR_DIRS)


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _format(file: str, line: str, fn: str, code: str, *, bare: bool = False) -> str:
    code = code.strip()
    text = f"{os.path.basename(file) if bare else _short(file)}:{line} in {fn}"
    return f"{text} ({code})" if code else text


def node_source(node, *, bare: bool = False) -> str | None:
    """ "models/net.py:42 in forward (return F.gelu(x))" for the innermost model frame; the path is
    relative to the working directory, or just the file's name with `bare` (for artifacts, whose
    bytes must not depend on where the build ran)."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return None
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return None
    user = [m for m in frames if not _is_library(m["file"])]
    m = (user or frames)[-1]
    return _format(m["file"], m["line"], m["fn"], m["code"], bare=bare)


def module_scope(node) -> str:
    """The module a node was traced in, as the LiteRT models tpuedge writes name its tensors:
    "blocks.0.attn.qkv/Linear", its qualified name (`named_modules()`'s) and its class; the root
    module as its class alone ("Net"); "" without torch.export's nn_module_stack. litert-torch
    writes the whole chain of modules there, each as its class's Python path and last attribute,
    unless handed this form (`edge/tensor_names.stack_as_scope`, as tpuedge's lowering does).
    Recomputed per IR node, it maps a flatbuffer tensor back to the nodes it came from (per-layer
    verify, the int8 search's ranked points)."""
    stack = _module_stack(node)
    if not stack:
        return ""
    path, kind = stack[-1]
    return f"{path}/{_class_name(kind)}" if path else _class_name(kind)


def module_chain(node) -> str:
    """The node's module chain as litert-torch names it, class paths cut to the class:
    "Net/Block_0/Linear_qkv" (the root module has no attribute); what a converter tensor name
    shortens to (edge/tensor_names.short_scope), and so the key that renames it."""
    return "/".join(
        _class_name(kind) + (f"_{path.split('.')[-1]}" if path else "") for path, kind in _module_stack(node)
    )


def _module_stack(node) -> list[tuple[str, object]]:
    """(qualified name, class) per module the node was traced in, outermost first."""
    stack = (node.meta.get("nn_module_stack") if hasattr(node, "meta") else None) or {}
    return [(str(path), kind) for path, kind in stack.values()]


def _class_name(kind) -> str:
    # a program loaded from a .pt2 keeps the class's qualified name as a string
    return (kind if isinstance(kind, str) else kind.__qualname__).rsplit(".", 1)[-1]


def user_frame_from_traceback(tb) -> str | None:
    """The innermost frame of a Python traceback that is not library code."""
    return _innermost_frame(tb, _is_library)


def model_frame_from_traceback(tb) -> str | None:
    """The user's innermost frame (`user_frame_from_traceback`); for a model whose code is all in a
    library (torchvision's, timm's, transformers'), the innermost frame outside torch and tpuedge."""
    return user_frame_from_traceback(tb) or _innermost_frame(
        tb, lambda path: any(k in path for k in _FRAMEWORK_MARKERS) or os.path.abspath(path).startswith(_OUR_DIRS)
    )


def _innermost_frame(tb, skipped) -> str | None:
    import traceback

    best = None
    for frame in traceback.extract_tb(tb):
        if not skipped(frame.filename):
            best = _format(frame.filename, str(frame.lineno), frame.name, frame.line or "")
    return best


def source_line(file: str, line: int) -> str:
    """ "models/net.py:42 (return F.pad(x, p))": a location a tool reported, with its code."""
    import linecache

    code = linecache.getline(file, line).strip()
    return f"{_short(file)}:{line} ({code})" if code else f"{_short(file)}:{line}"
