"""BatchNorm in quantization-aware training: folded into the convolution before it.

The int8 graph has no BatchNorm: the converter folds each one that follows a convolution into
the convolution's weight (scaled per output channel by gamma / sqrt(var + eps)) and bias. So
QAT trains that folded convolution, with BatchNorm's running statistics frozen into it (the
usual last phase of QAT), on a copy of the model: the per-channel int8 weights it fakes are the
folded ones the device will hold. The user's model keeps its BatchNorm modules; `step.program()`
and the trained parameters belong to the folded copy.

Which BatchNorm follows which convolution is read off the eval-mode capture: a BatchNorm node
whose input is a convolution used by nothing else, each op tagged with its module's path.
"""

from __future__ import annotations

import copy
from collections import Counter

__all__ = ["conv_batchnorm_pairs", "fold_batchnorm"]

_CONVS = {"aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default"}
_BATCHNORMS = {"aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default"}


def _module_path(node) -> str | None:
    stack = node.meta.get("nn_module_stack")
    return list(stack.values())[-1][0] if stack else None


def conv_batchnorm_pairs(program) -> list[tuple[str, str]]:
    """(convolution module path, BatchNorm module path) for each BatchNorm that only rescales
    one convolution's output, in graph order."""
    from tpuedge.shared_ir.op_registry import op_key

    pairs = []
    for node in program.exported_program.graph.nodes:
        if node.op != "call_function" or op_key(node.target) not in _BATCHNORMS:
            continue
        conv = node.args[0]
        if getattr(conv, "op", None) != "call_function" or op_key(conv.target) not in _CONVS or len(conv.users) != 1:
            continue
        conv_path, bn_path = _module_path(conv), _module_path(node)
        if conv_path and bn_path and conv_path != bn_path:
            pairs.append((conv_path, bn_path))
    # a module called twice (shared weights) would need two foldings: those stay unfolded
    uses = Counter(path for pair in pairs for path in pair)
    return [(c, b) for c, b in pairs if uses[c] == 1 and uses[b] == 1]


def fold_batchnorm(model, pairs: list[tuple[str, str]]):
    """(a copy of `model` with each pair's BatchNorm folded into its convolution and replaced by
    an identity, {folded parameter name: the model's parameter the optimizer knows it by})."""
    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    folded = copy.deepcopy(model).eval()
    aliases: dict[str, str] = {}
    for conv_path, bn_path in pairs:
        conv, bn = folded.get_submodule(conv_path), folded.get_submodule(bn_path)
        aliases[f"{conv_path}.weight"] = f"{conv_path}.weight"
        aliases[f"{conv_path}.bias"] = f"{conv_path}.bias" if conv.bias is not None else f"{bn_path}.bias"
        folded.set_submodule(conv_path, fuse_conv_bn_eval(conv, bn))
        folded.set_submodule(bn_path, torch.nn.Identity())
    return folded.train(model.training), aliases
