"""A graph pass: rank-4 float inputs become NHWC, with one permute back to NCHW in the graph.

litert-torch's layout pass then folds that permute into the NHWC kernels, so the .tflite takes
NHWC input with no TRANSPOSE op. Works on a (decomposed) ExportedProgram that we own; the
Program's own graph is never touched.
"""

from __future__ import annotations

__all__ = ["channels_last_inputs", "nhwc_shape"]


def nhwc_shape(shape) -> tuple:
    """(N, C, H, W) -> (N, H, W, C); other ranks unchanged."""
    shape = tuple(shape)
    return (shape[0], *shape[2:], shape[1]) if len(shape) == 4 else shape


def channels_last_inputs(ep):
    """Mutates and returns `ep` (a fresh ExportedProgram from a decomposition)."""
    import torch
    from torch.export.graph_signature import InputKind

    from tpuedge.shared_ir.torch_compat import tensor_metadata

    user_inputs = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    graph = ep.graph_module.graph
    for node in list(graph.nodes):
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if val is None or val.dim() != 4 or not val.dtype.is_floating_point:
            continue
        nhwc = val.permute(0, 2, 3, 1).contiguous()
        with graph.inserting_after(node):
            to_nchw = graph.call_function(torch.ops.aten.permute.default, (node, [0, 3, 1, 2]))
        node.replace_all_uses_with(to_nchw, delete_user_cb=lambda user: user is not to_nchw)
        to_nchw.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
        to_nchw.meta["val"] = val
        node.meta["val"] = nhwc
        if "tensor_meta" in node.meta:  # litert-torch types the lowered function's inputs by it
            to_nchw.meta["tensor_meta"] = node.meta["tensor_meta"]
            node.meta["tensor_meta"] = tensor_metadata(nhwc)
    ep.graph_module.recompile()
    if ep.example_inputs is not None:  # litert-torch reads them to resolve per-channel q/dq args
        args, kwargs = ep.example_inputs

        def nhwc_value(x):
            if isinstance(x, torch.Tensor) and x.dim() == 4 and x.dtype.is_floating_point:
                return x.permute(0, 2, 3, 1).contiguous()
            return x

        ep.example_inputs = (tuple(nhwc_value(a) for a in args), kwargs)
    return ep
