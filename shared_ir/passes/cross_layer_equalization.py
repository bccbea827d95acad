"""Cross-layer equalization (Nagel et al. 2019, "Data-free quantization"): for a convolution or
linear A whose output reaches a convolution or linear B only through an optional BatchNorm and
a ReLU, channel i of A's output is divided by s_i and B's input channel i multiplied by s_i.

ReLU commutes with a positive scale, so the float function is unchanged (to rounding). With
s_i = sqrt(r1_i / r2_i), where r1_i is the largest |weight| of A's output channel i (BatchNorm's
scale folded in) and r2_i the largest |weight| B applies to channel i, both become
sqrt(r1_i * r2_i): channels that one int8 scale served badly (a tiny channel beside a huge one,
in A's per-tensor activation or in B's per-output-channel weight) are brought level.

Left alone: B grouped (a depthwise B scales its own output channel too), ReLU6 and other
clamps (not scale-free), any tensor with another user, shared parameters.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program

__all__ = ["CrossLayerEqualization"]

_LINEAR_OPS = {"aten.conv1d.default": 0, "aten.conv2d.default": 0, "aten.linear.default": 0}  # weight's output axis
_SCALE_FREE = {"aten.relu.default", "aten.relu_.default"}
_BATCHNORM = "aten.batch_norm.default"
_FLOOR = 1e-8  # ranges below this are dead channels: left as they are


def _op(node) -> str:
    from tpuedge.shared_ir.op_registry import op_key

    return op_key(node.target) if node.op == "call_function" else node.op


def _only_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _groups(node) -> int:
    return int(node.args[6]) if _op(node) != "aten.linear.default" and len(node.args) > 6 else 1


def _scale(state: dict, target: str, by, axis: int) -> None:
    """state[target] times `by` along `axis`, as a new parameter (the input program keeps its own)."""
    import torch

    shape = [1] * state[target].dim()
    shape[axis] = -1
    state[target] = torch.nn.Parameter(
        state[target].detach() * by.reshape(shape), requires_grad=state[target].requires_grad
    )


class CrossLayerEqualization:
    name = "cross-layer-equalization"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch
        from torch.export.graph_signature import InputKind

        params = {
            s.arg.name: s.target for s in exported_program.graph_signature.input_specs if s.kind == InputKind.PARAMETER
        }
        buffers = {
            s.arg.name: s.target for s in exported_program.graph_signature.input_specs if s.kind == InputKind.BUFFER
        }
        uses: dict[str, int] = {}
        for node in exported_program.graph.nodes:
            for arg in node.all_input_nodes:
                uses[arg.name] = uses.get(arg.name, 0) + 1

        def param(node) -> str | None:  # a parameter only this op reads
            name = getattr(node, "name", None)
            return params.get(name) if name in params and uses.get(name) == 1 else None

        chains = []
        for a in exported_program.graph.nodes:
            if _op(a) not in _LINEAR_OPS or param(a.args[1]) is None:
                continue
            bias = a.args[2] if len(a.args) > 2 else None
            if bias is not None and param(bias) is None:
                continue
            norm, act = None, _only_user(a)
            if act is not None and _op(act) == _BATCHNORM and act.args[0] is a:
                norm, act = act, _only_user(act)
                if any(param(n) is None for n in norm.args[1:3]) or any(
                    buffers.get(n.name) is None for n in norm.args[3:5]
                ):
                    continue
            if act is None or _op(act) not in _SCALE_FREE:
                continue
            b = _only_user(act)
            if (
                b is None
                or _op(b) not in _LINEAR_OPS
                or b.args[0] is not act
                or _groups(b) != 1
                or param(b.args[1]) is None
            ):
                continue
            chains.append((a, bias, norm, b))
        if not chains:
            return exported_program, PassResult(self.name, 0, "no conv/linear -> relu -> conv/linear pair to equalize")

        ep = copy_program(exported_program)
        state = ep.state_dict
        for a, bias, norm, b in chains:
            w_a, w_b = state[params[a.args[1].name]].detach(), state[params[b.args[1].name]].detach()
            gain = torch.ones(w_a.shape[0])
            if norm is not None:
                var = state[buffers[norm.args[4].name]]
                eps = float(norm.args[7]) if len(norm.args) > 7 else 1e-5
                gain = state[params[norm.args[1].name]].detach() / torch.sqrt(var + eps)
            r1 = w_a.reshape(w_a.shape[0], -1).abs().amax(1) * gain.abs()
            r2 = w_b.transpose(0, 1).reshape(w_b.shape[1], -1).abs().amax(1)
            live = (r1 > _FLOOR) & (r2 > _FLOOR)
            s = torch.where(live, torch.sqrt(r1 / torch.where(live, r2, 1.0)), torch.ones_like(r1))

            last = norm if norm is not None else a  # the affine op whose output channel i is divided by s_i
            last_bias = norm.args[2] if norm is not None else bias
            for node, by, axis in ((last.args[1], 1.0 / s, 0), (last_bias, 1.0 / s, 0), (b.args[1], s, 1)):
                if node is not None:
                    _scale(state, params[node.name], by, axis)
        return ep, PassResult(self.name, len(chains), f"equalized {len(chains)} conv/linear pair(s) across a relu")
